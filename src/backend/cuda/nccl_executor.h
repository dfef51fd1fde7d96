// Runs NcclGroup descriptions (calls/nccl_call.h) with NCCL: one communicator per rank (ncclCommInitRank from a
// unique id, on the rank's GPU), a stream of its own for communication and events so that communication overlaps
// compute. Compiled into the CUDA module only (module_entry.cpp's nccl_* entries). Tested on the CPU against a fake
// NCCL (tests/cuda/executors/test_nccl_executor.cpp: each description becomes the right call, groups are bracketed,
// the streams wait on each other) and on a GPU by tests/cuda/gpu/test_nccl_gpu.cpp (one rank per GPU).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "backend/cuda/calls/nccl_call.h"

namespace vitpipe::cuda {

ncclDataType_t nccl_data_type(ElementType type);

class NcclExecutor {
 public:
  // ncclGetUniqueId: on one rank, handed to the others by the caller. Throws std::runtime_error with NCCL's message.
  static ncclUniqueId unique_id();

  // Makes `device` current, joins the communicator of `id` as `rank` of `nranks` (blocks until every rank has
  // joined) and creates the communication stream (non-blocking) and its events. Throws std::runtime_error naming the
  // failing NCCL or CUDA call and its message.
  NcclExecutor(const ncclUniqueId& id, int nranks, int rank, int device);
  // Waits for outstanding work (errors are swallowed), then ncclCommDestroy, or ncclCommAbort after a failure.
  ~NcclExecutor();
  NcclExecutor(const NcclExecutor&) = delete;
  NcclExecutor& operator=(const NcclExecutor&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int device() const { return device_; }
  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }  // the communication stream

  // Issues `group` between ncclGroupStart and ncclGroupEnd and returns without waiting: NcclStream::compute calls
  // on `compute`; NcclStream::communication calls on the communication stream, after it waited for an event recorded
  // on `compute` now (so they see everything enqueued there so far, and overlap what comes after). The buffers must
  // stay untouched until wait() or query() says done. Throws std::runtime_error naming the call and NCCL's message.
  void enqueue(const NcclGroup& group, cudaStream_t compute);
  // Blocks until everything enqueue() issued has finished. Polls, so that an asynchronous NCCL failure
  // (ncclCommGetAsyncError: a peer gone, a network error) throws instead of hanging.
  void wait();
  // True when everything enqueue() issued has finished; never blocks. Throws on an asynchronous failure.
  bool query();
  // Makes `compute` wait, on the device, for the communication stream's groups that wait() or query() has not yet
  // seen finish (nothing once they have). No caller in the module yet: the gradient buckets wait on the host
  // (module_abi.h's nccl_wait) before the optimizer step; join is what a step that keeps the host out would use.
  void join(cudaStream_t compute);

 private:
  void check_async();
  bool finished(cudaEvent_t event, bool pending);

  int nranks_, rank_, device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;         // recorded on the compute stream; the communication stream waits for it
  cudaEvent_t comm_done_ = nullptr;     // recorded on the communication stream after each group that used it
  cudaEvent_t compute_done_ = nullptr;  // recorded on the compute stream after each group that used it
  bool comm_pending_ = false, compute_pending_ = false;
  bool failed_ = false;
};

}  // namespace vitpipe::cuda
