// Pipeline schedules as data (the DeepSpeed idea): a pure function gives each stage the list of instructions it
// runs for one optimizer step, and one executor interprets them. Nothing here touches a model or a network, so
// the schedules are unit-tested by playing every stage's list against the others (simulate_schedule below).
//
// Semantics of a list, in order, for the executor:
// - recv_* means "this data must have arrived before the next instruction that uses it". The executor may post
//   the matching non-blocking receive as early as it likes (e.g. when the previous receive completes), and must
//   wait for it at this point at the latest.
// - send_* posts a non-blocking send. Waiting for a send's completion must be deferred until its buffer is needed
//   again (or the end of the step): the peer may only post its receive after later instructions of ours.
// - forward/backward carry the micro-batch and the model chunk. With one chunk per rank (GPipe, 1F1B, ZB-H1) the
//   chunk is 0; interleaved 1F1B gives rank s the chunks (virtual stages) s, s + P, s + 2P, ...
// - backward = input and weight gradients together. ZB-H1 splits it into backward_input (the critical path, which
//   is what send_grad forwards) and backward_weight (deferred to fill bubbles); a stage's parameter gradients are
//   final after its last backward (or backward_weight) of the step.
// - Every list ends with reduce_grads then optimizer_step.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vitpipe {

enum class ScheduleKind {
  gpipe,             // all forwards, then all backwards: holds m micro-batches of activations
  one_f_one_b,       // PipeDream-flush / Megatron 1F1B: same bubble as GPipe, at most P micro-batches held
  interleaved_1f1b,  // Megatron interleaved 1F1B with v chunks per rank: bubble about 1/v of 1F1B
  zero_bubble_h1,    // ZB-H1 (Qi et al. 2023): backward split into input and weight parts; ~1/3 of 1F1B's bubble
};

// Accepts "gpipe", "1f1b", "interleaved" / "interleaved-1f1b", "zb-h1" / "zbh1"; throws listing the known names.
ScheduleKind parse_schedule_kind(std::string_view name);
const char* schedule_kind_name(ScheduleKind kind);  // the canonical spelling parse_schedule_kind accepts
bool schedule_splits_backward(ScheduleKind kind);   // true when it uses backward_input/backward_weight

enum class Op {
  load_micro_batch,  // first virtual stage: the images; last virtual stage: the labels (both when P == 1)
  recv_activation,
  forward,  // on the last virtual stage this includes the loss
  send_activation,
  recv_grad,
  backward,
  backward_input,
  backward_weight,
  send_grad,
  reduce_grads,  // all-reduce this stage's gradients across replicas (may have started during the backward)
  optimizer_step,
};

const char* op_name(Op op);

struct Instruction {
  Op op = Op::forward;
  int micro_batch = -1;  // -1 for reduce_grads and optimizer_step
  int chunk = 0;         // model chunk held by this rank; virtual stage = chunk * stages + stage

  bool operator==(const Instruction&) const = default;
};

std::string to_string(const Instruction& instruction);  // e.g. "F3", "B3", "SA3", "RG0.c1", "REDUCE", "STEP"

// The list of stage `stage` (0-based) for one step of `micro_batches` micro-batches through `stages` stages.
// `virtual_stages` (chunks per rank) must be 1 except for interleaved 1F1B, which also needs micro_batches to be a
// multiple of stages. Throws vitpipe::Error on a bad argument.
std::vector<Instruction> make_schedule(ScheduleKind kind, int stages, int micro_batches, int stage,
                                       int virtual_stages = 1);

// All stages' lists, index = stage.
std::vector<std::vector<Instruction>> make_all_schedules(ScheduleKind kind, int stages, int micro_batches,
                                                         int virtual_stages = 1);

inline int virtual_stage_of(int stages, int stage, int chunk) { return chunk * stages + stage; }

// Tags for the point-to-point messages of one step: distinct per (direction, micro-batch, chunk) modulo the 32000
// user tags (communicator.h); messages with equal tags between the same two ranks stay ordered (MPI non-overtaking).
// Both ends use the RECEIVING chunk: a sender of virtual stage j tags with chunk (j +- 1) / stages.
enum class MessageKind { activation = 0, gradient = 1 };
int p2p_tag(MessageKind kind, int micro_batch, int chunk, int virtual_stages = 1);

// ---------------------------------------------------------------------------------------------------------------
// Simulator: plays every stage's list against the others with blocking receives and buffered sends, in a time
// model where each compute instruction takes a fixed cost. It checks the lists are a valid step (every send has its
// receive with the same micro-batch and chunk, each forward/backward runs once, after its input), detects
// deadlock, and measures the bubble and peak activation memory.

// Costs per micro-batch of one whole stage (all its chunks together: a chunk of an interleaved rank takes 1/v).
struct SimulationCosts {
  double forward = 1.0;
  double backward = 2.0;        // a whole backward (input + weight gradients)
  double backward_input = 1.0;  // ZB-H1 parts; by default they sum to `backward`
  double backward_weight = 1.0;
  double message_latency = 0.0;  // send -> receivable
};

struct TimedInstruction {
  Instruction instruction;
  double start = 0.0;
  double end = 0.0;
};

struct SimulationResult {
  double makespan = 0.0;             // from the first compute start (time 0) to the last compute end
  std::vector<double> busy;          // per stage: time spent in forward/backward
  std::vector<double> stage_bubble;  // per stage: 1 - busy / makespan
  double bubble_fraction = 0.0;      // mean of stage_bubble
  std::vector<int> peak_in_flight;   // per stage: most micro-batch chunks whose activations were held at once
  std::vector<std::vector<TimedInstruction>> timeline;  // per stage, in execution order

  int max_peak_in_flight() const;
};

// Throws vitpipe::Error describing the problem on deadlock (which stage waits for what) or an invalid list.
SimulationResult simulate_schedules(const std::vector<std::vector<Instruction>>& lists, int micro_batches,
                                    int virtual_stages = 1, const SimulationCosts& costs = {});
// The same with each stage's own costs: per_stage[s] (its message_latency: the time a message stage s sends takes
// to arrive). Unequal stages are what the planner (plan/) simulates.
SimulationResult simulate_schedules(const std::vector<std::vector<Instruction>>& lists, int micro_batches,
                                    int virtual_stages, const std::vector<SimulationCosts>& per_stage);
SimulationResult simulate_schedule(ScheduleKind kind, int stages, int micro_batches, int virtual_stages = 1,
                                   const SimulationCosts& costs = {});

// Closed forms: (p-1)/(m+p-1) for GPipe and 1F1B, (p-1)/(v*m+p-1) for interleaved 1F1B, and for ZB-H1 with
// forward = backward_input = backward_weight, (p-1)/(3m+p-1). The simulator reproduces them in unit time.
double theoretical_bubble_fraction(ScheduleKind kind, int stages, int micro_batches, int virtual_stages = 1);

}  // namespace vitpipe
