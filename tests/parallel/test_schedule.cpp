#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "parallel/schedule.h"
#include "util/error.h"

namespace vitpipe {
namespace {

const ScheduleKind kAllKinds[] = {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved_1f1b,
                                  ScheduleKind::zero_bubble_h1};

std::string joined(const std::vector<Instruction>& list) {
  std::string text;
  for (const auto& in : list) {
    if (!text.empty()) text += ' ';
    text += to_string(in);
  }
  return text;
}

std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The (p, m, v) grid the tests sweep: P in 1..8, m in P..4P (interleaved: multiples of P, v in 2..3).
struct Case {
  ScheduleKind kind;
  int p, m, v;
};
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (ScheduleKind kind : kAllKinds) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = p; m <= 4 * p; ++m) {
        if (kind == ScheduleKind::interleaved_1f1b) {
          if (m % p != 0) continue;
          for (int v = 2; v <= 3; ++v) cases.push_back({kind, p, m, v});
        } else {
          cases.push_back({kind, p, m, 1});
        }
      }
    }
  }
  return cases;
}

std::string name(const Case& c) { return concat(schedule_kind_name(c.kind), " p=", c.p, " m=", c.m, " v=", c.v); }

TEST(Schedule, ExactListsForTwoStagesThreeMicroBatches) {
  EXPECT_EQ(joined(make_schedule(ScheduleKind::one_f_one_b, 2, 3, 0)),
            "L0 F0 SA0 L1 F1 SA1 RG0 B0 L2 F2 SA2 RG1 B1 RG2 B2 REDUCE STEP");
  EXPECT_EQ(joined(make_schedule(ScheduleKind::one_f_one_b, 2, 3, 1)),
            "L0 RA0 F0 B0 SG0 L1 RA1 F1 B1 SG1 L2 RA2 F2 B2 SG2 REDUCE STEP");
  EXPECT_EQ(joined(make_schedule(ScheduleKind::gpipe, 2, 3, 0)),
            "L0 F0 SA0 L1 F1 SA1 L2 F2 SA2 RG0 B0 RG1 B1 RG2 B2 REDUCE STEP");
  EXPECT_EQ(joined(make_schedule(ScheduleKind::gpipe, 1, 2, 0)), "L0 F0 L1 F1 B0 B1 REDUCE STEP");
  // ZB-H1, 2 stages: the last stage defers W by one step, the first runs B and W back to back.
  EXPECT_EQ(joined(make_schedule(ScheduleKind::zero_bubble_h1, 2, 2, 1)),
            "L0 RA0 F0 BI0 SG0 L1 RA1 F1 BI1 SG1 W0 W1 REDUCE STEP");
  EXPECT_EQ(joined(make_schedule(ScheduleKind::zero_bubble_h1, 2, 2, 0)),
            "L0 F0 SA0 L1 F1 SA1 RG0 BI0 W0 RG1 BI1 W1 REDUCE STEP");
  // Interleaved, 2 stages x 2 chunks: virtual stages 0 and 2 on rank 0, 1 and 3 on rank 1.
  auto rank1 = make_schedule(ScheduleKind::interleaved_1f1b, 2, 2, 1, 2);
  EXPECT_EQ(joined(rank1).substr(0, 26), "RA0 F0 SA0 RA1 F1 SA1 L0.c");
}

TEST(Schedule, EverySendHasItsReceive) {
  for (const Case& c : all_cases()) {
    auto lists = make_all_schedules(c.kind, c.p, c.m, c.v);
    // (kind, destination virtual stage, micro-batch) -> sends minus receives
    std::map<std::tuple<int, int, int>, int> balance;
    int sends = 0;
    for (int s = 0; s < c.p; ++s) {
      for (const auto& in : lists[static_cast<size_t>(s)]) {
        const int vs = virtual_stage_of(c.p, s, in.chunk);
        switch (in.op) {
          case Op::send_activation:
            ++balance[{0, vs + 1, in.micro_batch}];
            ++sends;
            break;
          case Op::send_grad:
            ++balance[{1, vs - 1, in.micro_batch}];
            ++sends;
            break;
          case Op::recv_activation:
            --balance[{0, vs, in.micro_batch}];
            break;
          case Op::recv_grad:
            --balance[{1, vs, in.micro_batch}];
            break;
          default:
            break;
        }
      }
    }
    for (const auto& [key, count] : balance) {
      EXPECT_EQ(count, 0) << name(c) << ": unmatched message kind " << std::get<0>(key) << " to virtual stage "
                          << std::get<1>(key) << " micro-batch " << std::get<2>(key);
    }
    // Each micro-batch crosses each of the p*v-1 boundaries once forward and once backward.
    EXPECT_EQ(sends, 2 * c.m * (c.p * c.v - 1)) << name(c);
  }
}

TEST(Schedule, EveryMicroBatchRunsForwardAndBackwardOncePerChunk) {
  for (const Case& c : all_cases()) {
    for (int s = 0; s < c.p; ++s) {
      std::map<std::tuple<int, int, int>, int> count;  // (op, micro-batch, chunk)
      auto list = make_schedule(c.kind, c.p, c.m, s, c.v);
      for (const auto& in : list) ++count[{static_cast<int>(in.op), in.micro_batch, in.chunk}];
      const bool split = schedule_splits_backward(c.kind);
      for (int k = 0; k < c.m; ++k) {
        for (int chunk = 0; chunk < c.v; ++chunk) {
          EXPECT_EQ((count[{static_cast<int>(Op::forward), k, chunk}]), 1) << name(c);
          if (split) {
            EXPECT_EQ((count[{static_cast<int>(Op::backward_input), k, chunk}]), 1) << name(c);
            EXPECT_EQ((count[{static_cast<int>(Op::backward_weight), k, chunk}]), 1) << name(c);
          } else {
            EXPECT_EQ((count[{static_cast<int>(Op::backward), k, chunk}]), 1) << name(c);
          }
        }
      }
      ASSERT_GE(list.size(), 2u);
      EXPECT_EQ(list[list.size() - 2].op, Op::reduce_grads) << name(c);
      EXPECT_EQ(list.back().op, Op::optimizer_step) << name(c);
    }
  }
}

TEST(Schedule, SimulatorFindsNoDeadlockAndTheoreticalBubble) {
  for (const Case& c : all_cases()) {
    SimulationResult r;
    ASSERT_NO_THROW(r = simulate_schedule(c.kind, c.p, c.m, c.v)) << name(c);
    const double theory = theoretical_bubble_fraction(c.kind, c.p, c.m, c.v);
    EXPECT_NEAR(r.bubble_fraction, theory, 1e-9) << name(c);
    // In the unit-time model every stage idles the same amount.
    for (double b : r.stage_bubble) EXPECT_NEAR(b, theory, 1e-9) << name(c);
  }
}

TEST(Schedule, BubbleMatchesTheoryForOtherBackwardCosts) {
  SimulationCosts costs;
  costs.forward = 1.0;
  costs.backward = 3.0;
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = p; m <= 3 * p; ++m) {
        auto r = simulate_schedule(kind, p, m, 1, costs);
        EXPECT_NEAR(r.bubble_fraction, (p - 1.0) / (m + p - 1.0), 1e-9) << schedule_kind_name(kind) << p << m;
        EXPECT_NEAR(r.makespan, (m + p - 1) * 4.0, 1e-9);
      }
    }
  }
}

TEST(Schedule, PeakActivationsInFlight) {
  for (const Case& c : all_cases()) {
    auto r = simulate_schedule(c.kind, c.p, c.m, c.v);
    for (int s = 0; s < c.p; ++s) {
      const int peak = r.peak_in_flight[static_cast<size_t>(s)];
      switch (c.kind) {
        case ScheduleKind::gpipe:
          EXPECT_EQ(peak, c.m) << name(c);
          break;
        case ScheduleKind::one_f_one_b:
          EXPECT_EQ(peak, std::min(c.p - s, c.m)) << name(c) << " stage " << s;
          break;
        case ScheduleKind::zero_bubble_h1:
          EXPECT_LE(peak, c.p) << name(c);
          break;
        case ScheduleKind::interleaved_1f1b:
          // Megatron's warm-up: (p-s-1)*2 + (v-1)*p chunk forwards, plus the one in the steady state.
          EXPECT_LE(peak, std::min(c.m * c.v, 2 * (c.p - s - 1) + (c.v - 1) * c.p + 1)) << name(c);
          break;
      }
    }
    if (c.kind == ScheduleKind::one_f_one_b || c.kind == ScheduleKind::zero_bubble_h1) {
      EXPECT_EQ(r.max_peak_in_flight(), c.p) << name(c);
    }
  }
}

TEST(Schedule, FewerMicroBatchesThanStagesStillRuns) {
  // validate_parallel_config refuses this for training, but the schedules themselves stay correct.
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    auto r = simulate_schedule(kind, 4, 2);
    EXPECT_NEAR(r.bubble_fraction, theoretical_bubble_fraction(kind, 4, 2), 1e-9) << schedule_kind_name(kind);
  }
  // ZB-H1's closed form assumes m >= p; with fewer it still runs, between its ideal and 1F1B's bubble.
  auto r = simulate_schedule(ScheduleKind::zero_bubble_h1, 4, 2);
  EXPECT_GT(r.bubble_fraction, theoretical_bubble_fraction(ScheduleKind::zero_bubble_h1, 4, 2));
  EXPECT_LT(r.bubble_fraction, simulate_schedule(ScheduleKind::one_f_one_b, 4, 2).bubble_fraction + 1e-9);
}

TEST(Schedule, SimulatorTimelineIsConsistent) {
  auto r = simulate_schedule(ScheduleKind::one_f_one_b, 4, 8);
  ASSERT_EQ(r.timeline.size(), 4u);
  // Stage 3 starts its first forward after three forwards upstream, and stage 0 ends last.
  double first_forward = -1;
  for (const auto& t : r.timeline[3]) {
    if (t.instruction.op == Op::forward) {
      first_forward = t.start;
      break;
    }
  }
  EXPECT_DOUBLE_EQ(first_forward, 3.0);
  EXPECT_DOUBLE_EQ(r.makespan, (8 + 3) * 3.0);
  EXPECT_DOUBLE_EQ(r.busy[0], 8 * 3.0);
  for (const auto& stage : r.timeline) {
    for (size_t i = 1; i < stage.size(); ++i) EXPECT_GE(stage[i].start, stage[i - 1].end);
  }
}

TEST(Schedule, SimulatorDetectsDeadlock) {
  auto lists = make_all_schedules(ScheduleKind::one_f_one_b, 2, 2);
  // Stage 0 waits for the gradient of micro-batch 0 before sending its activation: a cycle.
  lists[0] = {{Op::load_micro_batch, 0, 0}, {Op::forward, 0, 0},         {Op::recv_grad, 0, 0},
              {Op::send_activation, 0, 0},  {Op::backward, 0, 0},        {Op::load_micro_batch, 1, 0},
              {Op::forward, 1, 0},          {Op::send_activation, 1, 0}, {Op::recv_grad, 1, 0},
              {Op::backward, 1, 0},         {Op::reduce_grads, -1, 0},   {Op::optimizer_step, -1, 0}};
  const std::string message = error_of([&] { simulate_schedules(lists, 2); });
  EXPECT_NE(message.find("deadlocks"), std::string::npos) << message;
  EXPECT_NE(message.find("stage 0 waits at RG0"), std::string::npos) << message;
  EXPECT_NE(message.find("stage 1 waits at RA0"), std::string::npos) << message;
}

TEST(Schedule, SimulatorRefusesInvalidLists) {
  auto base = make_all_schedules(ScheduleKind::one_f_one_b, 2, 2);
  {  // stage 1 receives micro-batch 1 where stage 0 sent micro-batch 0 first: never matched
    auto lists = base;
    for (auto& in : lists[1]) {
      if (in.op == Op::recv_activation) in.micro_batch = 1 - in.micro_batch;
    }
    const std::string message = error_of([&] { simulate_schedules(lists, 2); });
    EXPECT_NE(message.find("F"), std::string::npos) << message;
    EXPECT_EQ(message.find("(no error)"), std::string::npos);
  }
  {  // a send nobody receives
    auto lists = base;
    lists[1].insert(lists[1].end() - 2, Instruction{Op::send_grad, 0, 0});
    const std::string message = error_of([&] { simulate_schedules(lists, 2); });
    EXPECT_NE(message.find("sent twice"), std::string::npos) << message;
  }
  {  // a backward dropped
    auto lists = base;
    std::erase_if(lists[0], [](const Instruction& in) { return in.op == Op::backward && in.micro_batch == 1; });
    const std::string message = error_of([&] { simulate_schedules(lists, 2); });
    EXPECT_NE(message.find("has no finished backward"), std::string::npos) << message;
  }
  {  // a forward before its input arrived
    auto lists = base;
    std::erase_if(lists[1], [](const Instruction& in) { return in.op == Op::recv_activation && in.micro_batch == 0; });
    const std::string message = error_of([&] { simulate_schedules(lists, 2); });
    EXPECT_NE(message.find("stage 1 instruction F0: its input has not been received"), std::string::npos) << message;
  }
  {  // an activation sent but the receive removed: caught at the end
    auto lists = base;
    std::erase_if(lists[1], [](const Instruction& in) { return in.op == Op::recv_activation && in.micro_batch == 1; });
    std::erase_if(lists[1], [](const Instruction& in) { return in.micro_batch == 1; });
    std::erase_if(lists[0], [](const Instruction& in) { return in.op == Op::recv_grad && in.micro_batch == 1; });
    std::erase_if(lists[0], [](const Instruction& in) { return in.op == Op::backward && in.micro_batch == 1; });
    const std::string message = error_of([&] { simulate_schedules(lists, 2); });
    EXPECT_NE(message.find("micro-batch 1"), std::string::npos) << message;
  }
  {  // optimizer step before reduce
    auto lists = base;
    std::swap(lists[0][lists[0].size() - 1], lists[0][lists[0].size() - 2]);
    const std::string message = error_of([&] { simulate_schedules(lists, 2); });
    EXPECT_NE(message.find("OptimizerStep"), std::string::npos) << message;
  }
}

TEST(Schedule, BadArgumentsAreRefused) {
  EXPECT_NE(error_of([] { parse_schedule_kind("pipedream"); }).find("expected one of gpipe, 1f1b"), std::string::npos);
  EXPECT_EQ(parse_schedule_kind("1f1b"), ScheduleKind::one_f_one_b);
  EXPECT_EQ(parse_schedule_kind("gpipe"), ScheduleKind::gpipe);
  EXPECT_EQ(parse_schedule_kind("interleaved"), ScheduleKind::interleaved_1f1b);
  EXPECT_EQ(parse_schedule_kind("zb-h1"), ScheduleKind::zero_bubble_h1);
  for (ScheduleKind kind : kAllKinds) EXPECT_EQ(parse_schedule_kind(schedule_kind_name(kind)), kind);
  EXPECT_THROW(make_schedule(ScheduleKind::gpipe, 0, 4, 0), Error);
  EXPECT_THROW(make_schedule(ScheduleKind::gpipe, 4, 4, 4), Error);
  EXPECT_THROW(make_schedule(ScheduleKind::gpipe, 4, 0, 0), Error);
  EXPECT_NE(error_of([] { make_schedule(ScheduleKind::one_f_one_b, 4, 8, 0, 2); }).find("must be 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_schedule(ScheduleKind::interleaved_1f1b, 4, 6, 0, 2); }).find("multiple of"),
            std::string::npos);
}

TEST(Schedule, P2pTagsAreDistinctWithinAStep) {
  std::map<int, int> seen;
  for (int kind = 0; kind < 2; ++kind) {
    for (int k = 0; k < 512; ++k) {
      for (int chunk = 0; chunk < 4; ++chunk) {
        const int tag = p2p_tag(static_cast<MessageKind>(kind), k, chunk, 4);
        EXPECT_GE(tag, 0);
        EXPECT_LT(tag, 32000);
        EXPECT_EQ(seen[tag]++, 0);
      }
    }
  }
}

}  // namespace
}  // namespace vitpipe
