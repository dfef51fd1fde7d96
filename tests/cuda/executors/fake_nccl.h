// A fake NCCL for the CPU suite: the entry points NcclExecutor calls, on host memory, with ranks as threads of the
// test (calls/nccl_host_ranks.h runs the groups with NCCL's semantics). Every call is recorded with its arguments, per
// calling thread, group brackets included; a grouped call runs at its ncclGroupEnd, a call outside a group at once.
// Linked into test_cuda_executors (and the probes on fakes) in place of libnccl.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>
#include <vector>

namespace vitpipe::fake_nccl {

struct Record {
  std::string function;  // "ncclGroupStart", "ncclAllReduce", ...
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int peer = -1;  // peer or root; -1 where the call has none
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

// The calling thread's records since its last call.
std::vector<Record> take_records();
// The next NCCL call of the calling thread (other than ncclGetErrorString / ncclGetLastError) returns `result`,
// with `message` as ncclGetLastError's text.
void fail_next(ncclResult_t result, const std::string& message);
// Every group the fake has run, all threads together.
long long groups_run();

}  // namespace vitpipe::fake_nccl
