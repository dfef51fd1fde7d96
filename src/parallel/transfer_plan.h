// When each pipeline stage issues its point-to-point transfers over NCCL, whose sends are not buffered: a send
// completes only when the peer's receive runs, a group only when every call in it has met its peer's, and a rank's
// groups run one after another on one stream. Per-op pairing (a send held until the next op's receive) suffices for
// one chunk per rank, but an interleaved rank talks to both neighbours for two chunks at once and its groups crossed
// (a deadlock from 4 micro-batches on 2 stages). So every rank simulates every stage's program in unit time, keys
// each transfer by the time it is due (a gradient: its producer's end; an activation: that, or its forward's start
// if later, so that no receive takes a slot before the host path would), and issues its own transfers in key order,
// one group per key and kind, each before the first op that starts at or after the key. Both ends of a transfer agree
// on its key, so by induction over keys the smallest unfinished key's groups are every involved rank's current group
// and match: no deadlock, for any schedule the simulator accepts (Megatron's per-step
// send_forward_backward_recv_forward_backward is the same idea: one group a step, with both neighbours). Tested by
// replaying the recorded calls with NCCL's matching (tests/cuda/fakes/test_pipeline_nccl_on_fakes.cpp).
#pragma once

#include <vector>

#include "parallel/schedule.h"

namespace vitpipe {

struct PlannedTransfer {
  bool send = false;      // else a receive
  bool gradient = false;  // else an activation
  int micro_batch = 0;
  int chunk = 0;  // this rank's chunk whose slot holds the tensor
  int peer = 0;   // the other stage (the pipeline group's rank)
};

struct TransferPlan {
  using Group = std::vector<PlannedTransfer>;
  std::vector<std::vector<Group>> before;  // [instruction]: groups issued before it (only compute ops have any)
  std::vector<Group> after;                // groups issued after the last instruction
  // The most micro-batches one chunk holds at once when a receive takes its slot as it is issued (before its op).
  int peak_slots = 0;
};

// `programs`: every stage's instruction list (training: make_all_schedules; evaluation: forward_only_schedule).
// `training`: a slot is held until its backward (or weight-gradient pass) ends, else until its forward does.
TransferPlan plan_transfers(const std::vector<std::vector<Instruction>>& programs, int virtual_stages, int stage,
                            bool training);

// Evaluation's program for `stage`: forwards only, in groups of `stages` micro-batches that go through the chunks
// one after another (interleaved's forward order, so that a stage's next chunk finds its inputs just arriving).
std::vector<Instruction> forward_only_schedule(int stages, int micro_batches, int stage, int virtual_stages);

}  // namespace vitpipe
