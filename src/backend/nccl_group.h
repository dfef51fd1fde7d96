// NCCL for one rank, from the host: the CUDA module's communicator (module_abi.h version 5: nccl_unique_id,
// nccl_comm_create, nccl_run, nccl_wait, nccl_query) on a module backend's GPU, over that backend's DEVICE tensors.
// Links no CUDA library. The unique id comes from the module on rank 0 and travels to the other ranks over a vitpipe
// Communicator (MPI across processes, or the local world's threads), which only ever sees those 128 host bytes: the
// tensors themselves move between GPUs through NCCL, never through MPI (Debian's Open MPI is not CUDA-aware).
//
// Every call is asynchronous: it is issued and returns, and its tensors must stay alive and untouched (neither read
// nor written, by the host or by later backend ops) until wait() returns or done() says true. Reductions go on the
// communicator's own stream, after everything the backend had enqueued (so they overlap what the backend enqueues
// next: the rest of the backward pass); send / recv go on the backend's stream, in order with its ops (the pipeline's
// activations). Every rank issues the same collectives in the same order; a send meets its peer's recv issued at the
// same point; calls between begin_group() and end_group() are one NCCL group (ncclGroupStart ... ncclGroupEnd):
// two ranks sending to each other at once must group their send with their recv.
//
// Tested on the CPU with the loopback table (ranks as threads over host memory, tests/cuda/test_nccl_group.cpp); the
// real module's side runs on a GPU in tests/cuda/gpu/test_nccl_gpu.cpp. The gradient buckets reduce through it
// (parallel/gradient_buckets.h) when the trainer runs on a GPU (--device cuda).
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/module_abi.h"
#include "parallel/communicator.h"
#include "parallel/device_reducer.h"
#include "tensor/tensor.h"

namespace vitpipe {

class NcclGroup final : public DeviceReducer {
 public:
  // Collective over `comm`: every member calls it with its own backend (one made by make_cuda_module_backend, on the
  // member's GPU). Rank 0 asks the module for a unique id, `comm` broadcasts it, and each member joins as comm.rank()
  // of comm.size(). Throws vitpipe::Error for another kind of backend, a module without NCCL, or NCCL's message.
  NcclGroup(Backend& backend, Communicator& comm);
  // Waits for what is outstanding (a failure is dropped: call wait() to see it), then destroys the communicator.
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Sums an f32 device tensor in place across every rank (ncclAllReduce).
  void allreduce_sum(const Tensor& device_f32) override;
  // Sums an f32 device tensor into the root's, in place (ncclReduce); the others' are left as they were.
  void reduce_sum(const Tensor& device_f32, int root) override;
  // Copies the root's f32 or bf16 device tensor into every rank's (ncclBroadcast).
  void broadcast(const Tensor& device, int root) override;
  // Sends an f32 or bf16 device tensor to `peer`, whose recv takes the same element count and type.
  void send(const Tensor& device, int peer);
  void recv(const Tensor& device, int peer);

  // Whether the module can order the backend's stream after the communication stream (module table version 9:
  // nccl_join); the loopback table cannot.
  bool can_join() const;
  // true: send / recv go on the communication stream, and the caller joins (below) before the backend's next op
  // touches their tensors; false (the default): on the backend's stream, in order with its ops.
  void set_point_to_point_on_communication_stream(bool on);
  // The backend's later ops wait, on the device, for everything issued on the communication stream so far; the
  // host waits for nothing. Requires can_join().
  void join();

  // The calls between them are issued together as one group at end_group() (nesting is not supported).
  void begin_group();
  void end_group();

  // Blocks until everything issued has finished. Throws vitpipe::Error with the module's message (a mismatched
  // call, an asynchronous NCCL failure).
  void wait() override;
  // True when everything issued has finished; never blocks.
  bool done() override;

 private:
  void issue(const VitpipeNcclCall& call);
  void run(const std::vector<VitpipeNcclCall>& calls);

  const VitpipeCudaModule* module_ = nullptr;
  std::shared_ptr<void> instance_;  // the module's backend: outlives the communicator
  void* comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  bool grouping_ = false;
  int32_t point_to_point_stream_ = VITPIPE_NCCL_STREAM_BACKEND;
  std::vector<VitpipeNcclCall> pending_;
};

}  // namespace vitpipe
