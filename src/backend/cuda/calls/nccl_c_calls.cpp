#include "backend/cuda/calls/nccl_c_calls.h"

#include <stdexcept>
#include <string>

namespace vitpipe::cuda {

static_assert(VITPIPE_NCCL_SEND == static_cast<int>(NcclOp::send) &&
                  VITPIPE_NCCL_RECV == static_cast<int>(NcclOp::recv) &&
                  VITPIPE_NCCL_ALL_REDUCE == static_cast<int>(NcclOp::all_reduce) &&
                  VITPIPE_NCCL_REDUCE == static_cast<int>(NcclOp::reduce) &&
                  VITPIPE_NCCL_BROADCAST == static_cast<int>(NcclOp::broadcast) &&
                  VITPIPE_NCCL_REDUCE_SCATTER == static_cast<int>(NcclOp::reduce_scatter),
              "the C table's NCCL op codes are NcclOp's values");

NcclGroup nccl_group_from_c(const VitpipeNcclCall* calls, int count) {
  if (count < 0 || (count > 0 && calls == nullptr)) {
    throw std::invalid_argument("NCCL: " + std::to_string(count) + " calls at " + (calls ? "an address" : "null"));
  }
  NcclGroup group;
  for (int i = 0; i < count; ++i) {
    const VitpipeNcclCall& c = calls[i];
    const std::string which = "NCCL call " + std::to_string(i) + " of " + std::to_string(count);
    if (c.op < VITPIPE_NCCL_SEND || c.op > VITPIPE_NCCL_REDUCE_SCATTER) {
      throw std::invalid_argument(which + ": unknown op " + std::to_string(c.op));
    }
    if (c.dtype != VITPIPE_DTYPE_F32 && c.dtype != VITPIPE_DTYPE_BF16) {
      throw std::invalid_argument(which + ": dtype " + std::to_string(c.dtype) + " (only f32 and bf16 move)");
    }
    if (c.stream != VITPIPE_NCCL_STREAM_COMMUNICATION && c.stream != VITPIPE_NCCL_STREAM_BACKEND) {
      throw std::invalid_argument(which + ": unknown stream " + std::to_string(c.stream));
    }
    NcclCall call;
    call.op = static_cast<NcclOp>(c.op);
    call.send = c.send;
    call.recv = c.recv;
    call.count = c.count;
    call.type = c.dtype == VITPIPE_DTYPE_F32 ? ElementType::f32 : ElementType::bf16;
    call.peer = c.peer;
    call.stream = c.stream == VITPIPE_NCCL_STREAM_BACKEND ? NcclStream::compute : NcclStream::communication;
    if (call.op != NcclOp::recv && call.send == nullptr && call.count > 0) {
      throw std::invalid_argument(which + ": " + describe(call) + " without a send buffer");
    }
    if (call.op != NcclOp::send && call.recv == nullptr && call.count > 0) {
      throw std::invalid_argument(which + ": " + describe(call) + " without a recv buffer");
    }
    group.calls.push_back(call);
  }
  return group;
}

VitpipeNcclCall nccl_call_to_c(const NcclCall& call) {
  VitpipeNcclCall c{};
  c.op = static_cast<int32_t>(call.op);
  c.dtype = call.type == ElementType::f32 ? VITPIPE_DTYPE_F32 : VITPIPE_DTYPE_BF16;
  c.send = call.send;
  c.recv = call.recv;
  c.count = call.count;
  c.peer = call.peer;
  c.stream = call.stream == NcclStream::compute ? VITPIPE_NCCL_STREAM_BACKEND : VITPIPE_NCCL_STREAM_COMMUNICATION;
  return c;
}

}  // namespace vitpipe::cuda
