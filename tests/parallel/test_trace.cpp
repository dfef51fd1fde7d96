#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "parallel/local_communicator.h"
#include "parallel/schedule.h"
#include "parallel/trace.h"
#include "util/atomic_file.h"

namespace vitpipe {
namespace {

std::string run_ranks(int size, const std::function<void(Communicator&)>& fn) {
  auto result = std::async(std::launch::async, [&]() -> std::string {
    try {
      run_local_ranks(size, fn);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  });
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    std::fprintf(stderr, "local ranks hang\n");
    std::abort();
  }
  return result.get();
}

TEST(Trace, RecorderScopesAndSteps) {
  TraceRecorder recorder(true, 3);
  recorder.set_step(7);
  {
    TraceRecorder::Scope scope(&recorder, "forward", kTraceCompute, 1, 4);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  recorder.record("send", kTraceP2p, 100, 50, 1, 4);  // negative length clamps to 0
  auto events = recorder.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].name, "forward");
  EXPECT_EQ(events[0].category, "compute");
  EXPECT_GE(events[0].duration_ns, 2'000'000);
  EXPECT_EQ(events[0].rank, 3);
  EXPECT_EQ(events[0].lane, 1);
  EXPECT_EQ(events[0].step, 7);
  EXPECT_EQ(events[0].micro_batch, 4);
  EXPECT_EQ(events[1].duration_ns, 0);
  TraceRecorder off(false);
  { TraceRecorder::Scope scope(&off, "forward", kTraceCompute); }
  off.record("x", "y", 0, 1);
  EXPECT_TRUE(off.events().empty());
  TraceRecorder::Scope no_recorder(nullptr, "forward", kTraceCompute);  // allowed: records nothing
}

TEST(Trace, GatheredChromeTraceFromThreeRanks) {
  const auto dir = std::filesystem::temp_directory_path() / ("vitpipe_trace_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "trace.json";
  std::string error = run_ranks(3, [&](Communicator& world) {
    TraceRecorder recorder;
    recorder.synchronize_start(world);
    recorder.set_lane_name(0, "stage " + std::to_string(world.rank()));
    recorder.set_step(0);
    for (int k = 0; k <= world.rank(); ++k) {
      recorder.record("forward", kTraceCompute, 1000 * k, 1000 * k + 1500, 0, k);
    }
    write_chrome_trace(world, recorder, "rank " + std::to_string(world.rank()), path);
  });
  ASSERT_EQ(error, "");
  auto json = nlohmann::json::parse(read_text_file(path));
  ASSERT_TRUE(json.contains("traceEvents"));
  int complete = 0, names = 0;
  for (const auto& e : json["traceEvents"]) {
    if (e["ph"] == "X") {
      ++complete;
      EXPECT_EQ(e["name"], "forward");
      EXPECT_EQ(e["cat"], "compute");
      const int k = e["args"]["micro_batch"];
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.0 * k);  // microseconds
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1.5);
      EXPECT_LE(k, e["pid"].get<int>());
      EXPECT_EQ(e["args"]["step"], 0);
    } else if (e["ph"] == "M" && e["name"] == "process_name") {
      ++names;
      EXPECT_EQ(e["args"]["name"], "rank " + std::to_string(e["pid"].get<int>()));
    }
  }
  EXPECT_EQ(complete, 1 + 2 + 3);
  EXPECT_EQ(names, 3);
  std::filesystem::remove_all(dir);
}

// The events of a simulated schedule, measured, give back the simulator's bubble.
TEST(Trace, MeasuredBubbleOfASimulatedScheduleEqualsTheSimulator) {
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::zero_bubble_h1}) {
    auto sim = simulate_schedule(kind, 4, 6);
    std::vector<TraceEvent> events;
    for (int step = 0; step < 2; ++step) {
      const int64_t offset = step * 1'000'000'000LL;  // a second apart: the optimizer in between is not bubble
      for (size_t s = 0; s < sim.timeline.size(); ++s) {
        for (const auto& t : sim.timeline[s]) {
          const bool compute = t.end > t.start;
          TraceEvent e;
          e.name = op_name(t.instruction.op);
          e.category = compute ? kTraceCompute : kTraceP2p;
          e.start_ns = offset + static_cast<int64_t>(t.start * 1e6);
          e.duration_ns = static_cast<int64_t>((t.end - t.start) * 1e6);
          e.rank = static_cast<int>(s);
          e.step = step;
          events.push_back(e);
        }
      }
    }
    auto measured = measured_bubble_fraction(events);
    EXPECT_EQ(measured.steps, 2);
    EXPECT_NEAR(measured.fraction, sim.bubble_fraction, 1e-9) << schedule_kind_name(kind);
    EXPECT_NEAR(measured.per_rank[0], sim.stage_bubble[0], 1e-9);
  }
}

TEST(Trace, MeasuredBubbleCountsOverlapOnce) {
  std::vector<TraceEvent> events(3);
  events[0] = {"forward", kTraceCompute, 0, 100, 0, 0, 0, 0, -1};
  events[1] = {"nested", kTraceCompute, 10, 20, 0, 0, 0, 0, -1};  // inside the first
  events[2] = {"backward", kTraceCompute, 150, 50, 1, 0, 0, 0, -1};
  auto measured = measured_bubble_fraction(events);
  // Window 0..200: rank 0 busy 100 (bubble 0.5), rank 1 busy 50 (bubble 0.75).
  EXPECT_NEAR(measured.per_rank[0], 0.5, 1e-12);
  EXPECT_NEAR(measured.per_rank[1], 0.75, 1e-12);
  EXPECT_NEAR(measured.fraction, 0.625, 1e-12);
  EXPECT_EQ(measured_bubble_fraction({}).fraction, 0.0);
}

}  // namespace
}  // namespace vitpipe
