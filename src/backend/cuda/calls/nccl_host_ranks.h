// NCCL's semantics over ranks that are threads of one process, on host memory: what the loopback module table
// (backend/cuda_module_loopback.h) and the tests' fake NCCL library (tests/cuda/executors/fake_nccl.cpp) run their
// communicators on, so that the code above them is tested without a GPU. A communicator is found by its 128-byte
// unique id, as ncclCommInitRank finds it; joining blocks until every rank has joined. A group's collectives meet the
// other ranks' collectives of the group issued at the same point (every rank, in the same order; the arithmetic is
// the interpreter's, nccl_interpreter.h: sums in double, in rank order, rounded once); its sends are buffered (copied
// when issued, so two ranks sending to each other cannot deadlock) and its recvs wait for their peer's next send.
// Unlike NCCL, a wait that outlasts `timeout` (a partner that never comes) throws instead of hanging.
#pragma once

#include <array>
#include <chrono>
#include <memory>

#include "backend/cuda/calls/nccl_call.h"

namespace vitpipe::cuda {

using NcclIdBytes = std::array<char, 128>;

// An id no other call in this process returns (a counter and the process id, the rest zero).
NcclIdBytes host_nccl_unique_id();

class HostNcclComm {
 public:
  // Throws std::runtime_error for a rank out of range, a rank taken twice, a count that differs from the other
  // ranks', or when the other ranks do not join within `timeout`.
  HostNcclComm(const NcclIdBytes& id, int nranks, int rank,
               std::chrono::milliseconds timeout = std::chrono::milliseconds(60000));
  ~HostNcclComm();
  HostNcclComm(const HostNcclComm&) = delete;
  HostNcclComm& operator=(const HostNcclComm&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }

  // Runs one group, blocking until its collectives and recvs are done. Throws std::runtime_error naming the mismatch
  // (the interpreter's message), a peer out of range, a recv that meets a send of another count or type, or a
  // partner that did not come within the timeout.
  void run(const NcclGroup& group);

  struct World;  // the ranks' shared state (nccl_host_ranks.cpp)

 private:
  std::shared_ptr<World> world_;
  int nranks_, rank_;
  std::chrono::milliseconds timeout_;
  uint64_t next_collective_ = 0;
};

}  // namespace vitpipe::cuda
