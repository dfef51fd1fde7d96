// Pipeline stages on GPUs exchange activations and their gradients device to device with ncclSend / ncclRecv
// (backend/nccl_group.h, one communicator per pipeline over its stages), instead of host copies and MPI messages.
//
// NCCL's point-to-point calls are not buffered: a send finishes only when its peer's recv runs, and both wait on the
// GPU's stream. The schedules (schedule.h) assume buffered sends, as MPI gives them, so sends issued alone could
// deadlock 1F1B (stage 0 sending micro-batch 1 forward while stage 1 sends micro-batch 0's gradient back). So the
// executor holds each send until its next compute op: one that consumes a receive issues it in one NCCL group with
// the held sends (Megatron's send-forward-recv-backward pair), so both sides' groups progress together; any other
// issues the held sends first. No slot is written while a send from it is held. Tested on the fake NCCL
// (tests/cuda/fakes/test_pipeline_nccl_on_fakes.cpp), which also replays every rank's recorded groups with NCCL's
// unbuffered matching to show they cannot deadlock. The groups run on the communicator's own stream, which waits for
// the backend's stream (an event) before each; after each the backend's stream waits for it (nccl_join, module table
// version 9), so a received tensor is complete before the op consuming it and a sent one is not overwritten early;
// the host waits for nothing until finish(). A module without nccl_join (the loopback table) keeps the calls on the
// backend's stream. Joining right after each group keeps the order simple; it does not yet overlap a group with the
// compute after it (that needs joins placed where the buffers are next touched).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/nccl_group.h"
#include "parallel/communicator.h"
#include "tensor/tensor.h"

namespace vitpipe {

class NcclStageExchange {
 public:
  // Collective over `pipeline_group` (ranked by stage): every stage joins one NCCL communicator on its backend's GPU.
  NcclStageExchange(Backend& backend, Communicator& pipeline_group);

  // Holds a send of `device` to stage `peer` until the next issue(); `device` stays untouched until it is joined.
  void send(const Tensor& device, int peer);
  // Posts a receive into `device` from stage `peer`, issued by the next issue(); read it only once it is joined.
  void recv(const Tensor& device, int peer);
  // Issues the held sends and posted receives as one NCCL group; returns its number (1, 2, ...), or the last one's
  // when nothing was held or posted.
  int64_t issue();
  // The backend's later ops wait, on the device, for group `group` (and every group issued so far): call it before
  // the first op that reads a tensor it received or writes one it sent. Nothing when already joined.
  void join_through(int64_t group);
  // End of a step: issues what is held, joins, and waits until every call has finished (an asynchronous NCCL failure
  // throws here).
  void finish();

 private:
  struct Transfer {
    Tensor data;
    int peer;
  };

  std::unique_ptr<NcclGroup> nccl_;
  bool joined_ = false;  // the groups go on the communication stream and are joined
  std::vector<Transfer> held_, posted_;
  int64_t issued_ = 0, joined_through_ = 0;
};

}  // namespace vitpipe
