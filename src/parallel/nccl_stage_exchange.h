// Pipeline stages on GPUs exchange activations and their gradients device to device with ncclSend / ncclRecv
// (backend/nccl_group.h, one communicator per pipeline over its stages), instead of host copies and MPI messages.
//
// NCCL's point-to-point calls are not buffered: a send finishes only when its peer's recv runs, a group only when
// every call in it has met its peer's, and one rank's groups run one after another. Which transfers go in which
// group, and before which op, is transfer_plan.h's (one global order that every rank follows, so no schedule
// deadlocks, interleaved included); this class holds the sends and posts the receives the executor names and issues
// them as one group. An interleaved rank's chunks share the one backend, so one communicator and one compute stream
// order every chunk's transfers. The groups run on the communicator's own stream, which waits for the backend's
// stream (an event) before each; the backend's stream waits for them (nccl_join, module table version 9) only when
// the executor calls join_through(), just before the first op that reads a tensor a group received or writes one it
// sent, so the compute in between overlaps the transfer. A join waits for every group issued so far, so the executor
// joins a group its next op needs before issuing later ones. The host waits for nothing until finish(). A module
// without nccl_join (the loopback table) keeps the calls on the backend's stream, in order with its ops. Tested on
// the fake NCCL (tests/cuda/fakes/test_pipeline_nccl_on_fakes.cpp), which also replays every rank's recorded groups
// with NCCL's unbuffered matching and checks the joins against a log of the module calls.
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
