// Runs one communicator scenario on every rank of an mpirun job; exits 0 when every check passed. A failed check
// throws, and run_or_abort turns it into an MPI_Abort of the whole job (non-zero exit), which is what ctest sees.
//
//   mpirun -np N parallel_mpi_driver p2p | collectives [TRACE_FILE] | pipeline KIND STAGES CHUNKS MICRO_BATCHES
//                                    | fail | exit | die
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "model/parameter_layout.h"
#include "parallel/communicator.h"
#include "parallel/gradient_buckets.h"
#include "parallel/mpi_communicator.h"
#include "parallel/process_grid.h"
#include "parallel/schedule.h"
#include "parallel/trace.h"

namespace vitpipe {
namespace {

// Ring exchange, ordering of same-tag messages, receives posted before and after the send, size mismatch.
void p2p(Communicator& world) {
  const int n = world.size(), r = world.rank();
  const int next = (r + 1) % n, previous = (r + n - 1) % n;
  std::vector<float> out(100000), in(100000, -1.0f);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(r) * 1e5f + static_cast<float>(i);
  std::vector<uint16_t> out16(33, static_cast<uint16_t>(0x3f80 + r)), in16(33);
  CommRequest recv = world.irecv(std::span<float>(in), previous, 1);
  CommRequest recv16 = world.irecv(std::span<uint16_t>(in16), previous, 2);
  CommRequest send = world.isend(std::span<const float>(out), next, 1);
  CommRequest send16 = world.isend(std::span<const uint16_t>(out16), next, 2);
  while (!recv.test()) {
  }
  recv16.wait();
  send.wait();
  send16.wait();
  for (size_t i = 0; i < in.size(); ++i) {
    VP_REQUIRE(in[i] == static_cast<float>(previous) * 1e5f + static_cast<float>(i), "ring value ", i);
  }
  for (uint16_t v : in16) VP_REQUIRE(v == 0x3f80 + previous, "bf16 bits");

  // Three messages, same tag: in order, whether the receive was posted early or late.
  std::vector<CommRequest> sends;
  float values[3] = {1.0f + static_cast<float>(r), 2.0f, 3.0f};
  float got[3] = {0, 0, 0};
  CommRequest early = world.irecv(std::span<float>(&got[0], 1), previous, 7);
  for (float& v : values) sends.push_back(world.isend(std::span<const float>(&v, 1), next, 7));
  world.barrier();
  CommRequest late1 = world.irecv(std::span<float>(&got[1], 1), previous, 7);
  CommRequest late2 = world.irecv(std::span<float>(&got[2], 1), previous, 7);
  early.wait();
  late1.wait();
  late2.wait();
  wait_all(sends);
  VP_REQUIRE(got[0] == 1.0f + static_cast<float>(previous) && got[1] == 2.0f && got[2] == 3.0f, "order");

  // A message shorter than the receive is an error naming both sizes.
  float small[2] = {1, 2}, big[3];
  CommRequest mismatch_send = world.isend(std::span<const float>(small, 2), next, 9);
  std::string message;
  try {
    world.irecv(std::span<float>(big, 3), previous, 9).wait();
  } catch (const Error& e) {
    message = e.what();
  }
  mismatch_send.wait();
  VP_REQUIRE(message.find("received 8 bytes from rank " + std::to_string(previous) +
                          " (tag 9) where the receive expected 12") != std::string::npos,
             "size mismatch message: '", message, "'");
  bool refused = false;
  try {
    world.isend(std::span<const float>(small, 1), r, 0);
  } catch (const Error&) {
    refused = true;
  }
  VP_REQUIRE(refused, "sending to oneself is refused");
}

std::shared_ptr<const ParameterLayout> tiny_layout() {
  ViTConfig config;
  config.hidden_size = 16;
  config.num_hidden_layers = 4;
  config.num_attention_heads = 2;
  config.intermediate_size = 32;
  config.image_size = 8;
  config.patch_size = 4;
  config.labels = {"a", "b", "c"};
  return std::make_shared<const ParameterLayout>(config);
}

// Bucketed all-reduce over the data-parallel groups, small collectives, gather, a trace written by rank 0.
void collectives(Communicator& world, const std::string& trace_path) {
  const int n = world.size(), r = world.rank();
  const int stages = n % 2 == 0 ? 2 : 1;
  ProcessGrid grid(n, r, stages);
  auto group = world.split(grid.stage(), grid.replica());
  VP_REQUIRE(group && group->size() == grid.replicas() && group->rank() == grid.replica(), "data-parallel group");
  TraceRecorder trace;
  trace.synchronize_start(world);
  trace.set_lane_name(0, "stage " + std::to_string(grid.stage()));

  // Several buckets in flight at once, waited in reverse order.
  std::vector<std::vector<float>> buckets;
  std::vector<CommRequest> requests;
  for (int b = 0; b < 4; ++b) {
    buckets.emplace_back(static_cast<size_t>(1000 * (b + 1)), static_cast<float>(r + b));
    requests.push_back(group->iallreduce_sum(buckets.back().data(), buckets.back().size()));
  }
  for (int b = 3; b >= 0; --b) requests[static_cast<size_t>(b)].wait();
  float expected_base = 0;
  for (int rank : grid.data_parallel_ranks()) expected_base += static_cast<float>(rank);
  for (int b = 0; b < 4; ++b) {
    for (float v : buckets[static_cast<size_t>(b)]) {
      VP_REQUIRE(v == expected_base + static_cast<float>(b * grid.replicas()), "bucket ", b, " value ", v);
    }
  }

  // GradientBuckets on a real layout: each stage's gradients summed over replicas, scaled by 1/replicas.
  auto layout = tiny_layout();
  const auto ranges = split_segments(4, stages);
  const SegmentRange mine = ranges[static_cast<size_t>(grid.stage())];
  FlatParameters grads(layout, mine.first, mine.last);
  GradientBuckets reducer({grads}, group.get(), GradientBucketOptions{2048, 1.0f / static_cast<float>(grid.replicas())},
                          &trace);
  for (int step = 0; step < 2; ++step) {
    trace.set_step(step);
    for (int64_t i = 0; i < grads.numel(); ++i) {
      grads.data()[i] = static_cast<float>(grid.replica() + 1) * static_cast<float>(i % 5) + static_cast<float>(step);
    }
    for (int s = mine.last; s >= mine.first; --s) {
      TraceRecorder::Scope scope(&trace, "backward", kTraceCompute, 0, s);
      reducer.mark_ready(s);
    }
    reducer.finish();
    const float replicas = static_cast<float>(grid.replicas());
    for (int64_t i = 0; i < grads.numel(); ++i) {
      const float expected =
          replicas * (replicas + 1) / 2 * static_cast<float>(i % 5) / replicas + static_cast<float>(step);
      VP_REQUIRE(std::abs(grads.data()[i] - expected) <= 1e-5f * (1 + expected), "gradient ", i, ": ", grads.data()[i],
                 " != ", expected);
    }
  }

  // The sharded optimizer's collectives: a bucket summed into its owner only, then broadcast from it (in flight
  // together, waited in reverse order).
  std::vector<float> reduced(3000, static_cast<float>(r + 1)), gathered(2000, static_cast<float>(r));
  const int owner = world.size() - 1;
  CommRequest reduce = world.ireduce_sum(reduced.data(), reduced.size(), owner);
  CommRequest gather = world.ibroadcast(gathered.data(), gathered.size(), 0);
  gather.wait();
  reduce.wait();
  for (float v : reduced) {
    VP_REQUIRE(v == (r == owner ? n * (n + 1) / 2.0f : static_cast<float>(r + 1)), "reduce to rank ", owner, ": ", v);
  }
  for (float v : gathered) VP_REQUIRE(v == 0.0f, "broadcast from rank 0: ", v);

  double sums[2] = {static_cast<double>(r), 1.0};
  world.allreduce(sums, 2, ReduceOp::sum);
  VP_REQUIRE(sums[0] == n * (n - 1) / 2.0 && sums[1] == n, "allreduce doubles");
  VP_REQUIRE(world.allreduce(static_cast<double>(r), ReduceOp::max) == n - 1, "max");
  VP_REQUIRE(group->allreduce(static_cast<double>(r), ReduceOp::min) == grid.stage(), "min over the group");
  std::vector<float> shared(10, static_cast<float>(r));
  world.broadcast(std::span<float>(shared), n - 1);
  for (float v : shared) VP_REQUIRE(v == static_cast<float>(n - 1), "broadcast");
  world.barrier();
  std::vector<float> mine_values(static_cast<size_t>(r), static_cast<float>(r));  // rank 0 sends nothing
  auto all = world.gather(std::span<const float>(mine_values), 0);
  if (r == 0) {
    VP_REQUIRE(static_cast<int>(all.size()) == n, "gather count");
    for (int k = 0; k < n; ++k) {
      VP_REQUIRE(all[static_cast<size_t>(k)] == std::vector<float>(static_cast<size_t>(k), static_cast<float>(k)),
                 "gather from ", k);
    }
  } else {
    VP_REQUIRE(all.empty(), "only the root gathers");
  }
  if (!trace_path.empty()) write_chrome_trace(world, trace, grid.describe(), trace_path);
}

// A toy model run by the schedules over real messages: virtual stage j multiplies by w_j = 1 + j/10; the loss is
// the sum of the last output. So dL/dw_j = sum over micro-batches and replicas of sum_i x0_i * prod_{l != j} w_l.
void pipeline(Communicator& world, ScheduleKind kind, int stages, int chunks, int micro_batches) {
  ProcessGrid grid(world.size(), world.rank(), stages);
  auto group = world.split(grid.stage(), grid.replica());
  const int virtual_stages = stages * chunks;
  const size_t width = 64;
  auto weight = [](int vs) { return 1.0f + 0.1f * static_cast<float>(vs); };
  auto input = [&](int replica, int k, size_t i) {
    return 0.01f * static_cast<float>((k + 1) * (static_cast<int>(i) + 1)) + static_cast<float>(replica);
  };
  const auto list = make_schedule(kind, stages, micro_batches, grid.stage(), chunks);
  for (int step = 0; step < 2; ++step) {
    std::vector<double> dw(static_cast<size_t>(chunks), 0.0);
    // Per (micro-batch, chunk): the input x, the output y, the incoming gradient g.
    std::map<std::pair<int, int>, std::vector<float>> x, y, g, g_in;
    std::vector<CommRequest> sends;
    for (const Instruction& in : list) {
      const int vs = virtual_stage_of(stages, grid.stage(), in.chunk);
      const auto key = std::make_pair(in.micro_batch, in.chunk);
      switch (in.op) {
        case Op::load_micro_batch:
          if (vs == 0) {
            auto& v = x[key];
            v.resize(width);
            for (size_t i = 0; i < width; ++i) v[i] = input(grid.replica(), in.micro_batch, i);
          }
          break;
        case Op::recv_activation: {
          auto& v = x[key];
          v.resize(width);
          world
              .irecv(std::span<float>(v), grid.rank_of_virtual_stage(vs - 1),
                     p2p_tag(MessageKind::activation, in.micro_batch, in.chunk, chunks))
              .wait();
          break;
        }
        case Op::forward: {
          auto& out = y[key];
          out.resize(width);
          for (size_t i = 0; i < width; ++i) out[i] = weight(vs) * x.at(key)[i];
          if (vs == virtual_stages - 1) g[key].assign(width, 1.0f);  // d(sum)/dy
          break;
        }
        case Op::send_activation:
          sends.push_back(world.isend(std::span<const float>(y.at(key)), grid.rank_of_virtual_stage(vs + 1),
                                      p2p_tag(MessageKind::activation, in.micro_batch, (vs + 1) / stages, chunks)));
          break;
        case Op::recv_grad: {
          auto& v = g[key];
          v.resize(width);
          world
              .irecv(std::span<float>(v), grid.rank_of_virtual_stage(vs + 1),
                     p2p_tag(MessageKind::gradient, in.micro_batch, in.chunk, chunks))
              .wait();
          break;
        }
        case Op::backward:
        case Op::backward_input:
        case Op::backward_weight: {
          if (in.op != Op::backward_weight) {
            auto& gi = g_in[key];
            gi.resize(width);
            for (size_t i = 0; i < width; ++i) gi[i] = weight(vs) * g.at(key)[i];
          }
          if (in.op != Op::backward_input) {
            for (size_t i = 0; i < width; ++i) dw[static_cast<size_t>(in.chunk)] += x.at(key)[i] * g.at(key)[i];
          }
          break;
        }
        case Op::send_grad:
          sends.push_back(world.isend(std::span<const float>(g_in.at(key)), grid.rank_of_virtual_stage(vs - 1),
                                      p2p_tag(MessageKind::gradient, in.micro_batch, (vs - 1) / stages, chunks)));
          break;
        case Op::reduce_grads:
          group->allreduce(dw.data(), dw.size(), ReduceOp::sum);
          break;
        case Op::optimizer_step:
          wait_all(sends);
          break;
      }
    }
    for (int c = 0; c < chunks; ++c) {
      const int vs = virtual_stage_of(stages, grid.stage(), c);
      double expected = 0;
      for (int replica = 0; replica < grid.replicas(); ++replica) {
        for (int k = 0; k < micro_batches; ++k) {
          for (size_t i = 0; i < width; ++i) {
            double term = input(replica, k, i);
            for (int l = 0; l < virtual_stages; ++l) {
              if (l != vs) term *= weight(l);
            }
            expected += term;
          }
        }
      }
      VP_REQUIRE(std::abs(dw[static_cast<size_t>(c)] - expected) <= 1e-4 * std::abs(expected), "step ", step,
                 " virtual stage ", vs, ": dw ", dw[static_cast<size_t>(c)], " != ", expected);
    }
  }
}

// Every rank all-reduces in a loop; the last rank throws at step 3 (inside run_or_abort, like the CLI).
void fail(Communicator& world) {
  for (int step = 0;; ++step) {
    if (world.rank() == world.size() - 1 && step == 3) throw Error("injected failure at step 3");
    float x = 1.0f;
    world.iallreduce_sum(&x, 1).wait();
  }
}

}  // namespace
}  // namespace vitpipe

int main(int argc, char** argv) {
  using namespace vitpipe;
  auto world = mpi_world();
  const std::string scenario = argc > 1 ? argv[1] : "";
  if (scenario == "exit" && world->rank() == 1) {
    // A rank that reports its error and returns without run_or_abort: the exit handler still aborts the job.
    std::fprintf(stderr, "error: rank 1 gives up\n");
    return 1;
  }
  run_or_abort(*world, [&] {
    if (scenario == "p2p") {
      p2p(*world);
    } else if (scenario == "collectives") {
      collectives(*world, argc > 2 ? argv[2] : "");
    } else if (scenario == "pipeline") {
      VP_REQUIRE(argc == 6, "usage: pipeline KIND STAGES CHUNKS MICRO_BATCHES");
      pipeline(*world, parse_schedule_kind(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]));
    } else if (scenario == "fail") {
      fail(*world);
    } else if (scenario == "exit") {
      float x = 0;
      world->irecv(std::span<float>(&x, 1), 1, 0).wait();  // rank 1 never sends
    } else if (scenario == "die") {
      for (int step = 0;; ++step) {
        if (world->rank() == 1 && step == 3) std::raise(SIGKILL);
        float x = 1.0f;
        world->iallreduce_sum(&x, 1).wait();
      }
    } else if (scenario == "late-finalize") {
      // Nothing here: rank 0 is late at the end (below), as when it writes a long report.
    } else {
      fail("unknown scenario '", scenario, "'");
    }
  });
  world->barrier();
  if (world->rank() == 0) std::printf("%s: ok on %d ranks\n", scenario.c_str(), world->size());
  const bool late = scenario == "late-finalize" && world->rank() == 0;
  world.reset();
  // The others wait in MPI_Finalize for rank 0, which never comes within their deadline (VITPIPE_COMM_TIMEOUT).
  if (late) std::this_thread::sleep_for(std::chrono::seconds(60));
  finalize_mpi();
  return 0;
}
