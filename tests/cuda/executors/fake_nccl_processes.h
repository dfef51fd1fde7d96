// The fake NCCL's transport between processes: ranks of one communicator in different processes (each `mpirun` rank
// loads its own fake) meet in a POSIX shared-memory segment named after the unique id's bytes, under a process-shared
// robust mutex and condition variable. A collective group is run as the in-process ranks run it
// (calls/nccl_interpreter.h: sums in double, in rank order, rounded once), every rank interpreting every rank's copied
// buffers, so the results equal the threads'. Every wait has a timeout (a rank that died or never came is an error,
// not a hang); the segment is unlinked as soon as every rank has joined, or by a rank that gave up waiting.
// Sends are buffered in a ring per ordered pair of ranks (copied when issued, as the in-process ranks buffer them);
// a recv takes its peer's next send.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/calls/nccl_call.h"
#include "backend/cuda/calls/nccl_host_ranks.h"

namespace vitpipe::fake_nccl {

class ProcessNcclComm {
 public:
  // Throws std::runtime_error when the segment cannot be made, for a count that differs from the other ranks', a rank
  // taken twice, or when the other ranks do not join within `timeout`.
  ProcessNcclComm(const cuda::NcclIdBytes& id, int nranks, int rank,
                  std::chrono::milliseconds timeout = std::chrono::milliseconds(60000));
  ~ProcessNcclComm();
  ProcessNcclComm(const ProcessNcclComm&) = delete;
  ProcessNcclComm& operator=(const ProcessNcclComm&) = delete;

  // Runs one group (blocking until its collectives and recvs are done). Throws std::runtime_error naming a mismatch,
  // a group or send too large for the segment, a peer out of range, or a partner that did not come within the timeout.
  void run(const cuda::NcclGroup& group);

  struct Segment;  // the shared layout (fake_nccl_processes.cpp)

 private:
  void join(const std::string& name);
  void run_collectives(const std::vector<cuda::NcclCall>& mine);

  Segment* segment_ = nullptr;
  size_t mapped_bytes_ = 0;
  int nranks_, rank_;
  std::chrono::milliseconds timeout_;
  uint64_t next_collective_ = 0;
};

// The shared-memory name of the communicator with this id: /vitpipe-fake-nccl-[SCOPE-]HASH, SCOPE from
// FAKE_NCCL_SCOPE (letters, digits, '-'), so that a test can look for its own segments only.
std::string segment_name(const cuda::NcclIdBytes& id);

// True when FAKE_NCCL_PROCESSES=1: every communicator of the fake goes through shared memory.
bool processes_transport();

}  // namespace vitpipe::fake_nccl
