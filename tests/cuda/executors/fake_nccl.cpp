#include "fake_nccl.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "backend/cuda/calls/nccl_host_ranks.h"
#include "fake_nccl_processes.h"

struct ncclComm {
  std::unique_ptr<vitpipe::cuda::HostNcclComm> host;
  std::unique_ptr<vitpipe::fake_nccl::ProcessNcclComm> processes;  // FAKE_NCCL_PROCESSES=1: ranks in other processes
  std::string last_error;
};

namespace vitpipe::fake_nccl {
namespace {

std::mutex records_mutex;
std::map<std::thread::id, std::vector<Record>> records;
std::atomic<long long> groups{0};

// Calls by function, all threads together. With FAKE_NCCL_REPORT set, printed to stderr when the process exits
// ("fake nccl calls: ncclSend=N ..."), so that a test of a whole binary can see which NCCL calls it made.
struct CallTotals {
  std::map<std::string, long long> by_function;
  ~CallTotals() {
    if (std::getenv("FAKE_NCCL_REPORT") == nullptr) return;
    std::string line = "fake nccl calls:";
    for (const auto& [function, n] : by_function) line += " " + function + "=" + std::to_string(n);
    std::fprintf(stderr, "%s\n", line.c_str());
  }
};
CallTotals totals;

thread_local int group_depth = 0;
thread_local std::vector<std::pair<ncclComm_t, cuda::NcclCall>> grouped;
thread_local ncclResult_t next_failure = ncclSuccess;
thread_local std::string next_failure_message;
thread_local std::string thread_last_error;

void record(Record r) {
  std::lock_guard<std::mutex> lock(records_mutex);
  ++totals.by_function[r.function];
  records[std::this_thread::get_id()].push_back(std::move(r));
}

// A failure planted by fail_next, taken by this call.
bool planted(ncclComm_t comm, ncclResult_t& result) {
  if (next_failure == ncclSuccess) return false;
  result = std::exchange(next_failure, ncclSuccess);
  thread_last_error = next_failure_message;
  if (comm != nullptr) comm->last_error = next_failure_message;
  return true;
}

ncclResult_t run(ncclComm_t comm, const cuda::NcclGroup& group) {
  try {
    if (comm->processes != nullptr) {
      comm->processes->run(group);
    } else {
      comm->host->run(group);
    }
    ++groups;
    return ncclSuccess;
  } catch (const std::exception& e) {
    comm->last_error = e.what();
    return ncclInvalidUsage;
  }
}

ncclResult_t call(const Record& r, cuda::NcclOp op) {
  record(r);
  ncclResult_t result = ncclSuccess;
  if (planted(r.comm, result)) return result;
  if (r.comm == nullptr) return ncclInvalidArgument;
  if (r.type != ncclFloat32 && r.type != ncclBfloat16) {
    r.comm->last_error = "the fake moves ncclFloat32 and ncclBfloat16 only";
    return ncclInvalidArgument;
  }
  if (r.op != ncclSum) {
    r.comm->last_error = "the fake reduces with ncclSum only";
    return ncclInvalidArgument;
  }
  const cuda::NcclCall c{op,
                         r.send,
                         r.recv,
                         r.count,
                         r.type == ncclFloat32 ? cuda::ElementType::f32 : cuda::ElementType::bf16,
                         r.peer,
                         cuda::NcclStream::communication};
  if (group_depth > 0) {
    grouped.emplace_back(r.comm, c);
    return ncclSuccess;
  }
  return run(r.comm, cuda::NcclGroup{{c}});
}

}  // namespace

std::vector<Record> take_records() {
  std::lock_guard<std::mutex> lock(records_mutex);
  return std::exchange(records[std::this_thread::get_id()], {});
}

void fail_next(ncclResult_t result, const std::string& message) {
  next_failure = result;
  next_failure_message = message;
}

long long groups_run() { return groups.load(); }

}  // namespace vitpipe::fake_nccl

using vitpipe::fake_nccl::Record;
namespace fake = vitpipe::fake_nccl;
using vitpipe::cuda::NcclOp;

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = 22809;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error (fake)";
    case ncclInvalidArgument:
      return "invalid argument (fake)";
    case ncclInvalidUsage:
      return "invalid usage (fake)";
    case ncclSystemError:
      return "unhandled system error (fake)";
    default:
      return "an NCCL error (fake)";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  return comm != nullptr ? comm->last_error.c_str() : fake::thread_last_error.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  fake::record({"ncclGetUniqueId"});
  ncclResult_t result = ncclSuccess;
  if (fake::planted(nullptr, result)) return result;
  const vitpipe::cuda::NcclIdBytes bytes = vitpipe::cuda::host_nccl_unique_id();
  std::memcpy(id->internal, bytes.data(), bytes.size());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  Record r{"ncclCommInitRank"};
  r.count = static_cast<size_t>(nranks);
  r.peer = rank;
  fake::record(r);
  ncclResult_t result = ncclSuccess;
  if (fake::planted(nullptr, result)) return result;
  try {
    vitpipe::cuda::NcclIdBytes bytes{};
    std::memcpy(bytes.data(), id.internal, bytes.size());
    auto c = std::make_unique<ncclComm>();
    if (fake::processes_transport()) {
      c->processes = std::make_unique<vitpipe::fake_nccl::ProcessNcclComm>(bytes, nranks, rank);
    } else {
      c->host = std::make_unique<vitpipe::cuda::HostNcclComm>(bytes, nranks, rank);
    }
    *comm = c.release();
    return ncclSuccess;
  } catch (const std::exception& e) {
    fake::thread_last_error = e.what();
    return ncclInvalidArgument;
  }
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  fake::record({"ncclCommDestroy", nullptr, nullptr, 0, ncclFloat32, ncclSum, -1, comm});
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  fake::record({"ncclCommAbort", nullptr, nullptr, 0, ncclFloat32, ncclSum, -1, comm});
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  *error = ncclSuccess;
  ncclResult_t result = ncclSuccess;
  if (fake::planted(comm, result)) *error = result;  // an asynchronous failure, as a peer gone would be
  return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
  fake::record({"ncclGroupStart"});
  ++fake::group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  fake::record({"ncclGroupEnd"});
  if (fake::group_depth == 0) return ncclInvalidUsage;
  if (--fake::group_depth > 0) return ncclSuccess;
  // The outermost end: each communicator's calls run as one group.
  std::vector<std::pair<ncclComm_t, vitpipe::cuda::NcclCall>> calls = std::exchange(fake::grouped, {});
  std::vector<std::pair<ncclComm_t, vitpipe::cuda::NcclGroup>> per_comm;
  for (auto& [comm, c] : calls) {
    if (per_comm.empty() || per_comm.back().first != comm) per_comm.push_back({comm, {}});
    per_comm.back().second.calls.push_back(c);
  }
  ncclResult_t result = ncclSuccess;
  if (fake::planted(per_comm.empty() ? nullptr : per_comm[0].first, result)) return result;
  for (auto& [comm, group] : per_comm) {
    if (const ncclResult_t r = fake::run(comm, group); r != ncclSuccess) return r;
  }
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return fake::call({"ncclSend", send, nullptr, count, type, ncclSum, peer, comm, stream}, NcclOp::send);
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  return fake::call({"ncclRecv", nullptr, recv, count, type, ncclSum, peer, comm, stream}, NcclOp::recv);
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return fake::call({"ncclAllReduce", send, recv, count, type, op, -1, comm, stream}, NcclOp::all_reduce);
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  return fake::call({"ncclReduce", send, recv, count, type, op, root, comm, stream}, NcclOp::reduce);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return fake::call({"ncclBroadcast", send, recv, count, type, ncclSum, root, comm, stream}, NcclOp::broadcast);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  return fake::call({"ncclReduceScatter", send, recv, count, type, op, -1, comm, stream}, NcclOp::reduce_scatter);
}

}  // extern "C"
