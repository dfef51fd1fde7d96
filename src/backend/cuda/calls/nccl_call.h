// NCCL calls as data: which operation, on which buffers, how many elements of which type, with which peer or root,
// on which of the rank's streams; a NcclGroup is the calls between one ncclGroupStart and ncclGroupEnd. Built by
// nccl_calls.h for the pipeline's activation exchange and the replicas' gradient reduction, run by the CPU
// interpreter (nccl_interpreter.h) over several simulated ranks in the tests.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "backend/cuda/calls/element_type.h"

namespace vitpipe::cuda {

enum class NcclOp : uint8_t {
  send,            // ncclSend(send, count, type, peer)
  recv,            // ncclRecv(recv, count, type, peer)
  all_reduce,      // ncclAllReduce(send, recv, count, type, ncclSum): every rank gets the sum
  reduce,          // ncclReduce(send, recv, count, type, ncclSum, root): the root gets the sum
  broadcast,       // ncclBroadcast(send, recv, count, type, root): every rank gets the root's send
  reduce_scatter,  // ncclReduceScatter(send, recv, count, type, ncclSum): send holds ranks x count, rank r gets the
                   // sum of block r (count = recvcount, equal on every rank)
};

enum class NcclStream : uint8_t { compute, communication };  // the rank's streams: pipeline vs gradient traffic

struct NcclCall {
  NcclOp op = NcclOp::all_reduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // elements
  ElementType type = ElementType::f32;
  int peer = -1;  // send / recv: the other rank; reduce / broadcast: the root; -1 otherwise
  NcclStream stream = NcclStream::communication;
};

struct NcclGroup {
  std::vector<NcclCall> calls;
};

std::string describe(const NcclCall& call);

}  // namespace vitpipe::cuda
