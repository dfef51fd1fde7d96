#include "parallel/transfer_plan.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>

#include "util/error.h"

namespace vitpipe {
namespace {

bool is_compute(Op op) {
  return op == Op::forward || op == Op::backward || op == Op::backward_input || op == Op::backward_weight;
}

// Unit-time durations in integers (a backward is two forwards).
int64_t duration(Op op) { return op == Op::backward ? 4 : is_compute(op) ? 2 : 0; }

// A transfer as both ends name it: (kind, sending virtual stage, micro-batch).
using TransferKey = std::tuple<int, int, int>;

}  // namespace

std::vector<Instruction> forward_only_schedule(int stages, int micro_batches, int stage, int virtual_stages) {
  const int p = stages, v = virtual_stages, last = v * p - 1;
  std::vector<Instruction> program;
  for (int first = 0; first < micro_batches; first += p) {
    for (int chunk = 0; chunk < v; ++chunk) {
      const int vs = virtual_stage_of(p, stage, chunk);
      for (int mb = first; mb < std::min(micro_batches, first + p); ++mb) {
        if (vs == 0 || vs == last) program.push_back({Op::load_micro_batch, mb, chunk});
        if (vs > 0) program.push_back({Op::recv_activation, mb, chunk});
        program.push_back({Op::forward, mb, chunk});
        if (vs < last) program.push_back({Op::send_activation, mb, chunk});
      }
    }
  }
  return program;
}

TransferPlan plan_transfers(const std::vector<std::vector<Instruction>>& programs, int virtual_stages, int stage,
                            bool training) {
  const int p = static_cast<int>(programs.size()), v = virtual_stages, last = v * p - 1;
  // Every stage's compute ops in unit time; a send is ready when its producer ends.
  std::map<TransferKey, int64_t> ready;
  std::vector<std::vector<int64_t>> start(static_cast<size_t>(p));
  std::vector<size_t> pc(static_cast<size_t>(p), 0);
  std::vector<int64_t> clock(static_cast<size_t>(p), 0);
  for (int s = 0; s < p; ++s) start[static_cast<size_t>(s)].assign(programs[static_cast<size_t>(s)].size(), -1);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const auto su = static_cast<size_t>(s);
      const auto& program = programs[su];
      for (; pc[su] < program.size(); ++pc[su]) {
        const Instruction& in = program[pc[su]];
        const int vs = virtual_stage_of(p, s, in.chunk);
        int64_t at = clock[su];
        if ((in.op == Op::forward && vs > 0) || ((in.op == Op::backward || in.op == Op::backward_input) && vs < last)) {
          const bool gradient = in.op != Op::forward;
          const auto it = ready.find({gradient, gradient ? vs + 1 : vs - 1, in.micro_batch});
          if (it == ready.end()) break;
          at = std::max(at, it->second);
        }
        if (in.op == Op::send_activation || in.op == Op::send_grad) {
          ready[{in.op == Op::send_grad, vs, in.micro_batch}] = clock[su];
        }
        start[su][pc[su]] = at;
        clock[su] = at + duration(in.op);
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    VP_REQUIRE(pc[static_cast<size_t>(s)] == programs[static_cast<size_t>(s)].size(), "transfer plan: stage ", s,
               " waits forever at instruction ", pc[static_cast<size_t>(s)]);
  }

  // When each transfer is due: a gradient when it is ready (its slot is held anyway, so receiving it early costs no
  // memory), an activation when it is ready and its forward starts (receiving it earlier would take a slot early).
  std::map<TransferKey, int64_t> due = ready;
  for (int s = 0; s < p; ++s) {
    const auto& list = programs[static_cast<size_t>(s)];
    for (size_t i = 0; i < list.size(); ++i) {
      const int vs = virtual_stage_of(p, s, list[i].chunk);
      if (list[i].op == Op::forward && vs > 0) {
        int64_t& at = due.at({false, vs - 1, list[i].micro_batch});
        at = std::max(at, start[static_cast<size_t>(s)][i]);
      }
    }
  }

  // This stage's transfers, ordered by (due time, kind, sending virtual stage, micro-batch) as their peers order
  // them.
  const auto& program = programs[static_cast<size_t>(stage)];
  const auto& times = start[static_cast<size_t>(stage)];
  struct Keyed {
    int64_t time;
    TransferKey key;
    PlannedTransfer transfer;
  };
  std::vector<Keyed> transfers;
  for (size_t i = 0; i < program.size(); ++i) {
    const Instruction& in = program[i];
    const int vs = virtual_stage_of(p, stage, in.chunk);
    if (in.op == Op::send_activation || in.op == Op::send_grad) {
      const bool gradient = in.op == Op::send_grad;
      const TransferKey key{gradient, vs, in.micro_batch};
      transfers.push_back(
          {due.at(key), key, {true, gradient, in.micro_batch, in.chunk, (gradient ? vs - 1 : vs + 1) % p}});
    } else if ((in.op == Op::forward && vs > 0) ||
               ((in.op == Op::backward || in.op == Op::backward_input) && vs < last)) {
      const bool gradient = in.op != Op::forward;
      const TransferKey key{gradient, gradient ? vs + 1 : vs - 1, in.micro_batch};
      transfers.push_back({due.at(key), key, {false, gradient, in.micro_batch, in.chunk, std::get<1>(key) % p}});
    }
  }
  // Gradients before activations of the same time, in groups of their own: before a backward its gradient's group
  // is joined and the previous forward's activation goes out after it, overlapping the backward (one group for both
  // would be joined before the backward). Both ends order a transfer by the same (time, kind, sender, micro-batch).
  auto order = [](const Keyed& k) {
    return std::make_tuple(k.time, 1 - std::get<0>(k.key), std::get<1>(k.key), std::get<2>(k.key));
  };
  std::sort(transfers.begin(), transfers.end(), [&](const Keyed& a, const Keyed& b) { return order(a) < order(b); });

  TransferPlan plan;
  plan.before.resize(program.size());
  size_t next = 0;
  auto take_until = [&](int64_t time, std::vector<TransferPlan::Group>& groups) {
    for (; next < transfers.size() && transfers[next].time <= time; ++next) {
      if (groups.empty() || next == 0 || transfers[next - 1].time != transfers[next].time ||
          transfers[next - 1].transfer.gradient != transfers[next].transfer.gradient) {
        groups.emplace_back();
      }
      groups.back().push_back(transfers[next].transfer);
    }
  };
  // Slots held per chunk: from the load, the forward or its receive's issue, to the end of its micro-batch (an
  // evaluation's: its forward, or the issue of its output's send).
  std::vector<std::vector<char>> held(static_cast<size_t>(v), std::vector<char>(1, 0));
  std::vector<int> holding(static_cast<size_t>(v), 0);
  auto hold = [&](int chunk, int mb) {
    auto& h = held[static_cast<size_t>(chunk)];
    if (h.size() <= static_cast<size_t>(mb)) h.resize(static_cast<size_t>(mb) + 1, 0);
    if (h[static_cast<size_t>(mb)]) return;
    h[static_cast<size_t>(mb)] = 1;
    plan.peak_slots = std::max(plan.peak_slots, ++holding[static_cast<size_t>(chunk)]);
  };
  for (size_t i = 0; i < program.size(); ++i) {
    const Instruction& in = program[i];
    if (!is_compute(in.op)) continue;
    take_until(times[i], plan.before[i]);
    for (const auto& group : plan.before[i]) {
      for (const PlannedTransfer& t : group) {  // a receive may reuse the slot of a send in its group (another tensor)
        if (t.send && !training) --holding[static_cast<size_t>(t.chunk)];
      }
      for (const PlannedTransfer& t : group) {
        if (!t.send && !t.gradient) hold(t.chunk, t.micro_batch);
      }
    }
    hold(in.chunk, in.micro_batch);
    const bool done =
        training ? in.op == Op::backward || in.op == Op::backward_weight : virtual_stage_of(p, stage, in.chunk) == last;
    if (done) --holding[static_cast<size_t>(in.chunk)];
  }
  take_until(std::numeric_limits<int64_t>::max(), plan.after);
  return plan;
}

}  // namespace vitpipe
