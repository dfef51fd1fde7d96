// The C table's NCCL calls (module_abi.h: VitpipeNcclCall) as the descriptions of nccl_call.h, shared by the module
// (module_entry.cpp) and the loopback table (backend/cuda_module_loopback.cpp) so that both read them alike.
#pragma once

#include "backend/cuda/calls/nccl_call.h"
#include "backend/cuda/module_abi.h"

namespace vitpipe::cuda {

// Throws std::invalid_argument for a negative count, an unknown op, stream or dtype (only f32 and bf16 move), a send
// without its send buffer or a recv without its recv buffer.
NcclGroup nccl_group_from_c(const VitpipeNcclCall* calls, int count);

// The reverse, for the host side (backend/nccl_group.cpp) and the tests.
VitpipeNcclCall nccl_call_to_c(const NcclCall& call);

}  // namespace vitpipe::cuda
