#include "backend/cuda/nccl_executor.h"

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

namespace vitpipe::cuda {
namespace {

std::string nccl_message(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  if (last != nullptr && last[0] != '\0') text += std::string(" (") + last + ")";
  return text;
}

void check(ncclResult_t result, ncclComm_t comm, const std::string& what) {
  if (result == ncclSuccess) return;
  throw std::runtime_error(what + " failed: " + nccl_message(result, comm));
}

void check(cudaError_t status, const std::string& what) {
  if (status == cudaSuccess) return;
  throw std::runtime_error(what + " failed: " + cudaGetErrorString(status));
}

}  // namespace

ncclDataType_t nccl_data_type(ElementType type) { return type == ElementType::f32 ? ncclFloat32 : ncclBfloat16; }

ncclUniqueId NcclExecutor::unique_id() {
  ncclUniqueId id{};
  check(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId");
  return id;
}

NcclExecutor::NcclExecutor(const ncclUniqueId& id, int nranks, int rank, int device)
    : nranks_(nranks), rank_(rank), device_(device) {
  const std::string where =
      " (rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ", GPU " + std::to_string(device) + ")";
  check(cudaSetDevice(device), "cudaSetDevice" + where);
  check(ncclCommInitRank(&comm_, nranks, id, rank), nullptr, "ncclCommInitRank" + where);
  try {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags" + where);
    for (cudaEvent_t* e : {&ready_, &comm_done_, &compute_done_}) {
      check(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreateWithFlags" + where);
    }
  } catch (...) {
    for (cudaEvent_t e : {ready_, comm_done_, compute_done_}) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    ncclCommDestroy(comm_);
    throw;
  }
}

NcclExecutor::~NcclExecutor() {
  try {
    if (!failed_) wait();
  } catch (...) {
    failed_ = true;
  }
  if (failed_) {
    ncclCommAbort(comm_);
  } else {
    ncclCommDestroy(comm_);
  }
  for (cudaEvent_t e : {ready_, comm_done_, compute_done_}) cudaEventDestroy(e);
  cudaStreamDestroy(stream_);
}

void NcclExecutor::enqueue(const NcclGroup& group, cudaStream_t compute) {
  bool uses_comm = false, uses_compute = false;
  for (const NcclCall& c : group.calls) (c.stream == NcclStream::compute ? uses_compute : uses_comm) = true;
  if (group.calls.empty()) return;
  if (uses_comm) {
    check(cudaEventRecord(ready_, compute), "cudaEventRecord on the compute stream");
    check(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent on the communication stream");
  }
  check(ncclGroupStart(), comm_, "ncclGroupStart");
  for (const NcclCall& c : group.calls) {
    const cudaStream_t s = c.stream == NcclStream::compute ? compute : stream_;
    const ncclDataType_t t = nccl_data_type(c.type);
    ncclResult_t result = ncclSuccess;
    const char* name = "";
    switch (c.op) {
      case NcclOp::send:
        name = "ncclSend";
        result = ncclSend(c.send, c.count, t, c.peer, comm_, s);
        break;
      case NcclOp::recv:
        name = "ncclRecv";
        result = ncclRecv(c.recv, c.count, t, c.peer, comm_, s);
        break;
      case NcclOp::all_reduce:
        name = "ncclAllReduce";
        result = ncclAllReduce(c.send, c.recv, c.count, t, ncclSum, comm_, s);
        break;
      case NcclOp::reduce:
        name = "ncclReduce";
        result = ncclReduce(c.send, c.recv, c.count, t, ncclSum, c.peer, comm_, s);
        break;
      case NcclOp::broadcast:
        name = "ncclBroadcast";
        result = ncclBroadcast(c.send, c.recv, c.count, t, c.peer, comm_, s);
        break;
      case NcclOp::reduce_scatter:
        name = "ncclReduceScatter";
        result = ncclReduceScatter(c.send, c.recv, c.count, t, ncclSum, comm_, s);
        break;
    }
    if (result != ncclSuccess) {
      const std::string message = nccl_message(result, comm_);
      ncclGroupEnd();  // closes the group (its result is that of the failed call)
      failed_ = true;
      throw std::runtime_error(describe(c) + ": " + name + " failed: " + message);
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  if (end != ncclSuccess) {
    failed_ = true;
    throw std::runtime_error("ncclGroupEnd (" + std::to_string(group.calls.size()) + " calls, the first " +
                             describe(group.calls[0]) + ") failed: " + nccl_message(end, comm_));
  }
  if (uses_comm) {
    check(cudaEventRecord(comm_done_, stream_), "cudaEventRecord on the communication stream");
    comm_pending_ = true;
  }
  if (uses_compute) {
    check(cudaEventRecord(compute_done_, compute), "cudaEventRecord on the compute stream");
    compute_pending_ = true;
  }
}

void NcclExecutor::check_async() {
  ncclResult_t async = ncclSuccess;
  check(ncclCommGetAsyncError(comm_, &async), comm_, "ncclCommGetAsyncError");
  if (async != ncclSuccess && async != ncclInProgress) {
    failed_ = true;
    throw std::runtime_error("NCCL failed asynchronously (rank " + std::to_string(rank_) + " of " +
                             std::to_string(nranks_) + "): " + nccl_message(async, comm_));
  }
}

bool NcclExecutor::finished(cudaEvent_t event, bool pending) {
  if (!pending) return true;
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaSuccess) return true;
  if (status != cudaErrorNotReady) {
    failed_ = true;
    check(status, "cudaEventQuery");
  }
  return false;
}

bool NcclExecutor::query() {
  check_async();
  if (finished(comm_done_, comm_pending_)) comm_pending_ = false;
  if (finished(compute_done_, compute_pending_)) compute_pending_ = false;
  return !comm_pending_ && !compute_pending_;
}

void NcclExecutor::wait() {
  while (!query()) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

void NcclExecutor::join(cudaStream_t compute) {
  if (comm_pending_) check(cudaStreamWaitEvent(compute, comm_done_, 0), "cudaStreamWaitEvent on the compute stream");
}

}  // namespace vitpipe::cuda
