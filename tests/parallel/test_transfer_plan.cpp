// transfer_plan.h on its own, for every schedule (GPipe, 1F1B, ZB-H1, interleaved with 2 and 3 chunks), 2 to 6
// stages and several micro-batch counts, training and evaluation: the plans of all stages together must (1) send
// each pair of stages' transfers in the order the receiver takes them (NCCL matches the k-th send from a to b with
// b's k-th receive from a, whatever they carry), (2) finish under NCCL's unbuffered matching (a group completes only
// when every call in it met its peer's in the peer's current group; a rank's groups run in order), (3) receive
// before the op that reads and send after the op that writes, and (4) hold no more slots than the host path.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "parallel/pipeline_executor.h"
#include "parallel/transfer_plan.h"

namespace vitpipe {
namespace {

struct Setting {
  ScheduleKind kind;
  int stages, chunks, micro_batches;
  bool training;
};

std::string describe(const Setting& s) {
  return std::string(schedule_kind_name(s.kind)) + " p=" + std::to_string(s.stages) + " v=" + std::to_string(s.chunks) +
         " m=" + std::to_string(s.micro_batches) + (s.training ? " step" : " evaluation");
}

bool is_compute(Op op) {
  return op == Op::forward || op == Op::backward || op == Op::backward_input || op == Op::backward_weight;
}

// A transfer as both ends know it: (gradient?, sending virtual stage, micro-batch).
using Identity = std::tuple<bool, int, int>;

Identity identity(const PlannedTransfer& t, int stages, int stage) {
  const int vs = virtual_stage_of(stages, stage, t.chunk);
  const int sender = t.send ? vs : (t.gradient ? vs + 1 : vs - 1);
  return {t.gradient, sender, t.micro_batch};
}

void check(const Setting& s) {
  SCOPED_TRACE(describe(s));
  const int p = s.stages, v = s.chunks, m = s.micro_batches;
  std::vector<std::vector<Instruction>> programs;
  if (s.training) {
    programs = make_all_schedules(s.kind, p, m, v);
  } else {
    for (int stage = 0; stage < p; ++stage) programs.push_back(forward_only_schedule(p, m, stage, v));
  }
  std::vector<std::vector<TransferPlan::Group>> groups(static_cast<size_t>(p));  // [stage][group]
  std::map<std::pair<int, int>, std::vector<Identity>> sent, received;           // (from, to) -> in issue order
  for (int stage = 0; stage < p; ++stage) {
    const auto& program = programs[static_cast<size_t>(stage)];
    const TransferPlan plan = plan_transfers(programs, v, stage, s.training);
    ASSERT_EQ(plan.before.size(), program.size());
    // No more slots than the host path's (the simulator's count), so going over NCCL costs no activation memory. An
    // evaluation runs on the slots of whatever step the stage was built for: the fewest are one micro-batch's (one
    // chunk), or p micro-batches' (interleaved).
    const int host_slots = std::max(
        1,
        simulate_schedule(s.kind, p, s.training ? m : (v > 1 ? p : 1), v).peak_in_flight[static_cast<size_t>(stage)]);
    EXPECT_LE(plan.peak_slots, host_slots);
    if (s.training) {
      EXPECT_EQ(activation_slots_needed(s.kind, p, m, stage, v), host_slots);
    }
    // Where each compute op of (chunk, micro-batch) sits, to check (3).
    std::map<std::tuple<Op, int, int>, size_t> at;
    for (size_t i = 0; i < program.size(); ++i) at[{program[i].op, program[i].chunk, program[i].micro_batch}] = i;
    auto add = [&](const TransferPlan::Group& group, size_t position) {
      groups[static_cast<size_t>(stage)].push_back(group);
      for (const PlannedTransfer& t : group) {
        const Identity id = identity(t, p, stage);
        if (t.send) {
          sent[{stage, t.peer}].push_back(id);
          const Op producer =
              t.gradient ? (s.kind == ScheduleKind::zero_bubble_h1 ? Op::backward_input : Op::backward) : Op::forward;
          EXPECT_LT(at.at({producer, t.chunk, t.micro_batch}), position) << "a send before its producer";
        } else {
          received[{t.peer, stage}].push_back(id);
          const Op consumer =
              t.gradient ? (s.kind == ScheduleKind::zero_bubble_h1 ? Op::backward_input : Op::backward) : Op::forward;
          EXPECT_GT(at.at({consumer, t.chunk, t.micro_batch}) + 1, position) << "a receive after its reader";
        }
      }
    };
    for (size_t i = 0; i < program.size(); ++i) {
      if (!plan.before[i].empty()) {
        EXPECT_TRUE(is_compute(program[i].op));
      }
      for (const auto& group : plan.before[i]) add(group, i);
    }
    for (const auto& group : plan.after) add(group, program.size());
  }
  // (1) Every transfer once, in the same order at both ends.
  EXPECT_EQ(sent, received);
  size_t transfers = 0;
  for (const auto& [pair, list] : sent) transfers += list.size();
  EXPECT_EQ(transfers, static_cast<size_t>((s.training ? 2 : 1) * m * (p * v - 1)));

  // (2) The unbuffered replay: the k-th send from a to b meets b's k-th receive from a, in both current groups.
  struct Call {
    bool send;
    int peer, ordinal;
    bool matched = false;
  };
  std::vector<std::vector<std::vector<Call>>> calls(static_cast<size_t>(p));
  for (int stage = 0; stage < p; ++stage) {
    std::map<std::pair<bool, int>, int> ordinals;
    for (const auto& group : groups[static_cast<size_t>(stage)]) {
      auto& out = calls[static_cast<size_t>(stage)].emplace_back();
      for (const PlannedTransfer& t : group) out.push_back({t.send, t.peer, ordinals[{t.send, t.peer}]++});
    }
  }
  std::vector<size_t> head(static_cast<size_t>(p), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      auto& mine_all = calls[static_cast<size_t>(r)];
      if (head[static_cast<size_t>(r)] == mine_all.size()) continue;
      auto& mine = mine_all[head[static_cast<size_t>(r)]];
      for (Call& c : mine) {
        auto& theirs_all = calls[static_cast<size_t>(c.peer)];
        if (c.matched || head[static_cast<size_t>(c.peer)] == theirs_all.size()) continue;
        for (Call& partner : theirs_all[head[static_cast<size_t>(c.peer)]]) {
          if (!partner.matched && partner.send != c.send && partner.peer == r && partner.ordinal == c.ordinal) {
            partner.matched = c.matched = true;
          }
        }
      }
      if (std::all_of(mine.begin(), mine.end(), [](const Call& c) { return c.matched; })) {
        ++head[static_cast<size_t>(r)];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(head[static_cast<size_t>(r)], calls[static_cast<size_t>(r)].size()) << "stage " << r << " deadlocks";
  }
}

TEST(TransferPlan, EverySchedulePairsItsTransfersAndCannotDeadlock) {
  for (const bool training : {true, false}) {
    for (int p = 2; p <= 6; ++p) {
      for (int m : {1, 2, 3, 4, 5, 8, 12}) {
        for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::zero_bubble_h1}) {
          check({kind, p, 1, m, training});
        }
        if (m % p == 0 || !training) {  // an evaluation's last batch may hold fewer micro-batches
          for (int v : {2, 3}) check({ScheduleKind::interleaved_1f1b, p, v, m, training});
        }
      }
    }
  }
}

}  // namespace
}  // namespace vitpipe
