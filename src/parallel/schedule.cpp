#include "parallel/schedule.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "util/error.h"

namespace vitpipe {

ScheduleKind parse_schedule_kind(std::string_view name) {
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  if (name == "interleaved" || name == "interleaved-1f1b") return ScheduleKind::interleaved_1f1b;
  if (name == "zb-h1" || name == "zbh1") return ScheduleKind::zero_bubble_h1;
  fail("unknown pipeline schedule '", name, "': expected one of gpipe, 1f1b, interleaved-1f1b, zb-h1");
}

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe:
      return "gpipe";
    case ScheduleKind::one_f_one_b:
      return "1f1b";
    case ScheduleKind::interleaved_1f1b:
      return "interleaved-1f1b";
    case ScheduleKind::zero_bubble_h1:
      return "zb-h1";
  }
  return "?";
}

bool schedule_splits_backward(ScheduleKind kind) { return kind == ScheduleKind::zero_bubble_h1; }

const char* op_name(Op op) {
  switch (op) {
    case Op::load_micro_batch:
      return "LoadMicroBatch";
    case Op::recv_activation:
      return "RecvActivation";
    case Op::forward:
      return "ForwardPass";
    case Op::send_activation:
      return "SendActivation";
    case Op::recv_grad:
      return "RecvGrad";
    case Op::backward:
      return "BackwardPass";
    case Op::backward_input:
      return "BackwardInput";
    case Op::backward_weight:
      return "BackwardWeight";
    case Op::send_grad:
      return "SendGrad";
    case Op::reduce_grads:
      return "ReduceGrads";
    case Op::optimizer_step:
      return "OptimizerStep";
  }
  return "?";
}

std::string to_string(const Instruction& instruction) {
  const char* prefix = "?";
  switch (instruction.op) {
    case Op::load_micro_batch:
      prefix = "L";
      break;
    case Op::recv_activation:
      prefix = "RA";
      break;
    case Op::forward:
      prefix = "F";
      break;
    case Op::send_activation:
      prefix = "SA";
      break;
    case Op::recv_grad:
      prefix = "RG";
      break;
    case Op::backward:
      prefix = "B";
      break;
    case Op::backward_input:
      prefix = "BI";
      break;
    case Op::backward_weight:
      prefix = "W";
      break;
    case Op::send_grad:
      prefix = "SG";
      break;
    case Op::reduce_grads:
      return "REDUCE";
    case Op::optimizer_step:
      return "STEP";
  }
  std::string text = concat(prefix, instruction.micro_batch);
  if (instruction.chunk != 0) text += concat(".c", instruction.chunk);
  return text;
}

int p2p_tag(MessageKind kind, int micro_batch, int chunk, int virtual_stages) {
  const long long tag =
      static_cast<long long>(kind) + 2LL * (chunk + static_cast<long long>(virtual_stages) * micro_batch);
  return static_cast<int>(tag % 32000);  // tags from 32000 up are the communicators' own (kMaxUserTag)
}

namespace {

// Appends the instructions of one forward or backward of (micro_batch, chunk), with its loads and messages.
class ListBuilder {
 public:
  ListBuilder(int stages, int stage, int virtual_stages)
      : stages_(stages), stage_(stage), virtual_stages_(virtual_stages) {}

  bool first(int chunk) const { return virtual_stage_of(stages_, stage_, chunk) == 0; }
  bool last(int chunk) const { return virtual_stage_of(stages_, stage_, chunk) == stages_ * virtual_stages_ - 1; }

  void forward(int micro_batch, int chunk) {
    if (first(chunk) || last(chunk)) add(Op::load_micro_batch, micro_batch, chunk);
    if (!first(chunk)) add(Op::recv_activation, micro_batch, chunk);
    add(Op::forward, micro_batch, chunk);
    if (!last(chunk)) add(Op::send_activation, micro_batch, chunk);
  }
  // Whole backward, or its input part when `split`.
  void backward(int micro_batch, int chunk, bool split) {
    if (!last(chunk)) add(Op::recv_grad, micro_batch, chunk);
    add(split ? Op::backward_input : Op::backward, micro_batch, chunk);
    if (!first(chunk)) add(Op::send_grad, micro_batch, chunk);
  }
  void backward_weight(int micro_batch, int chunk) { add(Op::backward_weight, micro_batch, chunk); }

  std::vector<Instruction> finish() {
    add(Op::reduce_grads, -1, 0);
    add(Op::optimizer_step, -1, 0);
    return std::move(list_);
  }

 private:
  void add(Op op, int micro_batch, int chunk) { list_.push_back(Instruction{op, micro_batch, chunk}); }

  int stages_, stage_, virtual_stages_;
  std::vector<Instruction> list_;
};

std::vector<Instruction> gpipe(int stages, int m, int stage) {
  ListBuilder list(stages, stage, 1);
  for (int k = 0; k < m; ++k) list.forward(k, 0);
  // Ascending order, like 1F1B: both accumulate the micro-batches' gradients in the same order.
  for (int k = 0; k < m; ++k) list.backward(k, 0, false);
  return list.finish();
}

// Step x runs F(x) then B(x - (p-1-s)) when those exist: p-1-s warm-up forwards, then one forward, one backward.
std::vector<Instruction> one_f_one_b(int stages, int m, int stage) {
  ListBuilder list(stages, stage, 1);
  const int lag = stages - 1 - stage;
  for (int x = 0; x < m + lag; ++x) {
    if (x < m) list.forward(x, 0);
    if (x - lag >= 0) list.backward(x - lag, 0, false);
  }
  return list.finish();
}

// ZB-H1's handcrafted schedule: step x runs F(x), B(x - (p-1-s)), W(x - (p-1)). The input-gradient wave moves as
// in 1F1B; each weight gradient waits until the stage would otherwise idle, and at most p micro-batches are held.
std::vector<Instruction> zero_bubble_h1(int stages, int m, int stage) {
  ListBuilder list(stages, stage, 1);
  const int lag = stages - 1 - stage;
  for (int x = 0; x < m + stages - 1; ++x) {
    if (x < m) list.forward(x, 0);
    if (x - lag >= 0 && x - lag < m) list.backward(x - lag, 0, true);
    if (x - (stages - 1) >= 0) list.backward_weight(x - (stages - 1), 0);
  }
  return list.finish();
}

// Megatron-LM's interleaved 1F1B (forward_backward_pipelining_with_interleaving): micro-batches go through the
// chunks in groups of p; warm-up depth grows by 2 per stage towards the front, plus (v-1)*p.
std::vector<Instruction> interleaved(int stages, int m, int stage, int v) {
  ListBuilder list(stages, stage, v);
  const int total = m * v;
  const int group = stages * v;
  auto chunk_of = [&](int k, bool forward) {
    const int chunk = (k % group) / stages;
    return forward ? chunk : v - 1 - chunk;
  };
  auto micro_batch_of = [&](int k) { return (k / group) * stages + k % stages; };
  const int warmup = std::min(total, (stages - stage - 1) * 2 + (v - 1) * stages);
  const int remaining = total - warmup;
  for (int k = 0; k < warmup; ++k) list.forward(micro_batch_of(k), chunk_of(k, true));
  for (int k = 0; k < remaining; ++k) {
    const int f = k + warmup;
    list.forward(micro_batch_of(f), chunk_of(f, true));
    list.backward(micro_batch_of(k), chunk_of(k, false), false);
  }
  for (int k = remaining; k < total; ++k) list.backward(micro_batch_of(k), chunk_of(k, false), false);
  return list.finish();
}

}  // namespace

std::vector<Instruction> make_schedule(ScheduleKind kind, int stages, int micro_batches, int stage,
                                       int virtual_stages) {
  VP_REQUIRE(stages >= 1, "pipeline stages must be at least 1, got ", stages);
  VP_REQUIRE(stage >= 0 && stage < stages, "stage ", stage, " is outside [0, ", stages, ")");
  VP_REQUIRE(micro_batches >= 1, "micro-batches per step must be at least 1, got ", micro_batches);
  VP_REQUIRE(virtual_stages >= 1, "virtual stages per rank must be at least 1, got ", virtual_stages);
  if (kind != ScheduleKind::interleaved_1f1b) {
    VP_REQUIRE(virtual_stages == 1, "the ", schedule_kind_name(kind),
               " schedule holds one model chunk per rank; virtual stages per rank must be 1, got ", virtual_stages);
  }
  switch (kind) {
    case ScheduleKind::gpipe:
      return gpipe(stages, micro_batches, stage);
    case ScheduleKind::one_f_one_b:
      return one_f_one_b(stages, micro_batches, stage);
    case ScheduleKind::zero_bubble_h1:
      return zero_bubble_h1(stages, micro_batches, stage);
    case ScheduleKind::interleaved_1f1b:
      VP_REQUIRE(micro_batches % stages == 0, "the interleaved-1f1b schedule needs micro-batches per step (",
                 micro_batches, ") to be a multiple of the pipeline stages (", stages, ")");
      return interleaved(stages, micro_batches, stage, virtual_stages);
  }
  fail("unknown schedule kind");
}

std::vector<std::vector<Instruction>> make_all_schedules(ScheduleKind kind, int stages, int micro_batches,
                                                         int virtual_stages) {
  std::vector<std::vector<Instruction>> lists;
  for (int s = 0; s < stages; ++s) lists.push_back(make_schedule(kind, stages, micro_batches, s, virtual_stages));
  return lists;
}

// ---------------------------------------------------------------------------------------------------------------
// Simulator

int SimulationResult::max_peak_in_flight() const {
  return peak_in_flight.empty() ? 0 : *std::max_element(peak_in_flight.begin(), peak_in_flight.end());
}

namespace {

// What one stage has done to one (micro-batch, chunk).
struct ChunkState {
  bool loaded = false;
  bool input_received = false;
  bool forward_done = false;
  bool grad_received = false;
  bool backward_done = false;  // backward, or backward_input
  bool weight_done = false;    // backward, or backward_weight
  bool activation_sent = false;
  bool grad_sent = false;
};

// A message on the wire: (kind, destination virtual stage, micro-batch).
using MessageKey = std::tuple<int, int, int>;

}  // namespace

SimulationResult simulate_schedules(const std::vector<std::vector<Instruction>>& lists, int micro_batches,
                                    int virtual_stages, const SimulationCosts& costs) {
  return simulate_schedules(lists, micro_batches, virtual_stages,
                            std::vector<SimulationCosts>(std::max<size_t>(lists.size(), 1), costs));
}

SimulationResult simulate_schedules(const std::vector<std::vector<Instruction>>& lists, int micro_batches,
                                    int virtual_stages, const std::vector<SimulationCosts>& per_stage) {
  const int stages = static_cast<int>(lists.size());
  VP_REQUIRE(stages >= 1 && micro_batches >= 1 && virtual_stages >= 1, "simulate: bad sizes");
  VP_REQUIRE(per_stage.size() == lists.size(), "simulate: ", per_stage.size(), " stage costs for ", stages, " stages");
  const int v = virtual_stages;
  const int last_virtual = stages * v - 1;
  const double chunk_scale = 1.0 / v;

  std::vector<std::vector<ChunkState>> state(static_cast<size_t>(stages),
                                             std::vector<ChunkState>(static_cast<size_t>(micro_batches * v)));
  std::map<MessageKey, double> wire;  // sent, not yet received: arrival time
  std::vector<size_t> pc(static_cast<size_t>(stages), 0);
  std::vector<double> clock(static_cast<size_t>(stages), 0.0);
  std::vector<int> in_flight(static_cast<size_t>(stages), 0);
  std::vector<bool> reduced(static_cast<size_t>(stages), false);

  SimulationResult result;
  result.busy.assign(static_cast<size_t>(stages), 0.0);
  result.peak_in_flight.assign(static_cast<size_t>(stages), 0);
  result.timeline.resize(static_cast<size_t>(stages));

  auto where = [&](int s, const Instruction& in) { return concat("stage ", s, " instruction ", to_string(in)); };

  // Executes the instruction at pc[s] if it can run now; false when it blocks on a receive.
  auto step = [&](int s) -> bool {
    const Instruction& in = lists[static_cast<size_t>(s)][pc[static_cast<size_t>(s)]];
    const auto su = static_cast<size_t>(s);
    const SimulationCosts& costs = per_stage[su];
    const bool has_micro_batch = in.op != Op::reduce_grads && in.op != Op::optimizer_step;
    ChunkState* cs = nullptr;
    int vs = 0;
    if (has_micro_batch) {
      VP_REQUIRE(in.micro_batch >= 0 && in.micro_batch < micro_batches, where(s, in), ": micro-batch outside [0, ",
                 micro_batches, ")");
      VP_REQUIRE(in.chunk >= 0 && in.chunk < v, where(s, in), ": chunk outside [0, ", v, ")");
      cs = &state[su][static_cast<size_t>(in.micro_batch * v + in.chunk)];
      vs = virtual_stage_of(stages, s, in.chunk);
    }
    VP_REQUIRE(!reduced[su] || in.op == Op::optimizer_step, where(s, in), ": comes after ReduceGrads");
    double start = clock[su];
    double cost = 0.0;
    switch (in.op) {
      case Op::load_micro_batch:
        VP_REQUIRE(vs == 0 || vs == last_virtual, where(s, in), ": only the first and last virtual stages load");
        VP_REQUIRE(!cs->loaded, where(s, in), ": loaded twice");
        cs->loaded = true;
        break;
      case Op::recv_activation:
      case Op::recv_grad: {
        const bool activation = in.op == Op::recv_activation;
        VP_REQUIRE(activation ? vs > 0 : vs < last_virtual, where(s, in), ": no neighbour to receive from");
        bool& received = activation ? cs->input_received : cs->grad_received;
        VP_REQUIRE(!received, where(s, in), ": received twice");
        auto it = wire.find({activation ? 0 : 1, vs, in.micro_batch});
        if (it == wire.end()) return false;  // blocks
        start = std::max(start, it->second);
        wire.erase(it);
        received = true;
        break;
      }
      case Op::forward:
        VP_REQUIRE(!cs->forward_done, where(s, in), ": forward runs twice");
        VP_REQUIRE(vs == 0 ? cs->loaded : cs->input_received, where(s, in), ": its input has not ",
                   vs == 0 ? "been loaded" : "been received");
        VP_REQUIRE(vs != last_virtual || cs->loaded, where(s, in), ": the labels have not been loaded");
        cs->forward_done = true;
        cost = costs.forward * chunk_scale;
        break;
      case Op::send_activation:
      case Op::send_grad: {
        const bool activation = in.op == Op::send_activation;
        VP_REQUIRE(activation ? vs < last_virtual : vs > 0, where(s, in), ": no neighbour to send to");
        VP_REQUIRE(activation ? cs->forward_done : cs->backward_done, where(s, in), ": sends before computing");
        bool& sent = activation ? cs->activation_sent : cs->grad_sent;
        VP_REQUIRE(!sent, where(s, in), ": sent twice");
        sent = true;
        wire[{activation ? 0 : 1, activation ? vs + 1 : vs - 1, in.micro_batch}] = start + costs.message_latency;
        break;
      }
      case Op::backward:
      case Op::backward_input:
        VP_REQUIRE(cs->forward_done, where(s, in), ": backward before forward");
        VP_REQUIRE(!cs->backward_done, where(s, in), ": backward runs twice");
        VP_REQUIRE(vs == last_virtual || cs->grad_received, where(s, in), ": its output gradient has not arrived");
        cs->backward_done = true;
        if (in.op == Op::backward) {
          cs->weight_done = true;
          cost = costs.backward * chunk_scale;
          --in_flight[su];
        } else {
          cost = costs.backward_input * chunk_scale;
        }
        break;
      case Op::backward_weight:
        VP_REQUIRE(cs->backward_done && !cs->weight_done, where(s, in),
                   ": BackwardWeight needs its BackwardInput first, and runs once");
        cs->weight_done = true;
        cost = costs.backward_weight * chunk_scale;
        --in_flight[su];
        break;
      case Op::reduce_grads:
        for (int k = 0; k < micro_batches * v; ++k) {
          VP_REQUIRE(state[su][static_cast<size_t>(k)].weight_done, where(s, in), ": micro-batch ", k / v, " chunk ",
                     k % v, " has no finished backward");
        }
        reduced[su] = true;
        break;
      case Op::optimizer_step:
        VP_REQUIRE(reduced[su], where(s, in), ": OptimizerStep before ReduceGrads");
        VP_REQUIRE(pc[su] + 1 == lists[su].size(), where(s, in), ": OptimizerStep must be last");
        break;
    }
    if (in.op == Op::forward) {
      ++in_flight[su];
      result.peak_in_flight[su] = std::max(result.peak_in_flight[su], in_flight[su]);
    }
    const double end = start + cost;
    clock[su] = end;
    result.busy[su] += cost;
    if (cost > 0) result.makespan = std::max(result.makespan, end);
    result.timeline[su].push_back({in, start, end});
    ++pc[su];
    return true;
  };

  for (;;) {
    bool progress = false;
    bool done = true;
    for (int s = 0; s < stages; ++s) {
      while (pc[static_cast<size_t>(s)] < lists[static_cast<size_t>(s)].size() && step(s)) progress = true;
      if (pc[static_cast<size_t>(s)] < lists[static_cast<size_t>(s)].size()) done = false;
    }
    if (done) break;
    if (!progress) {
      std::string blocked;
      for (int s = 0; s < stages; ++s) {
        const auto su = static_cast<size_t>(s);
        if (pc[su] < lists[su].size()) blocked += concat(" stage ", s, " waits at ", to_string(lists[su][pc[su]]), ";");
      }
      fail("pipeline schedule deadlocks:", blocked);
    }
  }
  for (int s = 0; s < stages; ++s) {
    const auto& list = lists[static_cast<size_t>(s)];
    VP_REQUIRE(!list.empty() && list.back().op == Op::optimizer_step && reduced[static_cast<size_t>(s)], "stage ", s,
               ": the list must end with ReduceGrads, OptimizerStep");
  }
  if (!wire.empty()) {
    const auto& [kind, to, micro_batch] = wire.begin()->first;
    fail("pipeline schedule: the ", kind == 0 ? "activation" : "gradient", " of micro-batch ", micro_batch,
         " sent to virtual stage ", to, " is never received");
  }
  double sum = 0.0;
  for (int s = 0; s < stages; ++s) {
    const double bubble = result.makespan > 0 ? 1.0 - result.busy[static_cast<size_t>(s)] / result.makespan : 0.0;
    result.stage_bubble.push_back(bubble);
    sum += bubble;
  }
  result.bubble_fraction = sum / stages;
  return result;
}

SimulationResult simulate_schedule(ScheduleKind kind, int stages, int micro_batches, int virtual_stages,
                                   const SimulationCosts& costs) {
  return simulate_schedules(make_all_schedules(kind, stages, micro_batches, virtual_stages), micro_batches,
                            virtual_stages, costs);
}

double theoretical_bubble_fraction(ScheduleKind kind, int stages, int micro_batches, int virtual_stages) {
  const double p = stages;
  const double m = micro_batches;
  switch (kind) {
    case ScheduleKind::gpipe:
    case ScheduleKind::one_f_one_b:
      return (p - 1) / (m + p - 1);
    case ScheduleKind::interleaved_1f1b:
      return (p - 1) / (virtual_stages * m + p - 1);
    case ScheduleKind::zero_bubble_h1:
      return (p - 1) / (3 * m + p - 1);
  }
  return 0.0;
}

}  // namespace vitpipe
