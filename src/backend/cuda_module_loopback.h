// A stand-in for libvitpipe_cuda.so's backend table that runs in this process on host memory: backend_create makes
// a CPU backend (make_cpu_backend), backend_call unpacks the call with the same routine the module uses
// (backend_call.h) and runs it there. Through make_cuda_module_backend it proves, on any machine, that the adapter
// and the unpacking agree on every op's arguments: the results must equal the CPU backend's bit for bit. Its nccl_*
// entries run communicators whose ranks are threads of this process, on host memory (calls/nccl_host_ranks.h).
#pragma once

#include "backend/cuda/module_abi.h"

namespace vitpipe {

const VitpipeCudaModule& cuda_module_loopback();

// How many calls went through the loopback table in this process (a test's proof that it was used).
long long cuda_module_loopback_calls();
// Of them, calls of op code `op`.
long long cuda_module_loopback_calls(int op);
// NCCL groups the loopback's communicators ran (ABI version 5: nccl_* over host memory, ranks as threads).
long long cuda_module_loopback_nccl_groups();

}  // namespace vitpipe
