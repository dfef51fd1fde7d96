#include "backend/cuda/calls/nccl_calls.h"

#include <cstdio>

namespace vitpipe::cuda {
namespace {

size_t elements(const RowMajorMatrix& m) { return static_cast<size_t>(m.rows * m.cols); }

NcclGroup per_shard(NcclOp op, float* range, int64_t range_begin, const std::vector<Shard>& shards) {
  NcclGroup group;
  for (size_t r = 0; r < shards.size(); ++r) {
    if (shards[r].end <= shards[r].begin) continue;  // an empty shard moves nothing
    float* data = range + (shards[r].begin - range_begin);
    group.calls.push_back({op, data, data, static_cast<size_t>(shards[r].end - shards[r].begin), ElementType::f32,
                           static_cast<int>(r), NcclStream::communication});
  }
  return group;
}

}  // namespace

std::string describe(const NcclCall& call) {
  static const char* const kOps[] = {"send", "recv", "all_reduce", "reduce", "broadcast"};
  char text[96];
  std::snprintf(text, sizeof text, "%s %zu x %s peer/root %d", kOps[static_cast<int>(call.op)], call.count,
                element_type_name(call.type), call.peer);
  return text;
}

NcclGroup send_activations(const RowMajorMatrix& activations, int next_stage_rank) {
  return {{{NcclOp::send, activations.data, nullptr, elements(activations), activations.type, next_stage_rank,
            NcclStream::compute}}};
}

NcclGroup recv_activations(const RowMajorMatrix& activations, int previous_stage_rank) {
  return {{{NcclOp::recv, nullptr, activations.data, elements(activations), activations.type, previous_stage_rank,
            NcclStream::compute}}};
}

NcclGroup all_reduce_gradients(float* gradients, size_t count) {
  return {{{NcclOp::all_reduce, gradients, gradients, count, ElementType::f32, -1, NcclStream::communication}}};
}

NcclGroup reduce_gradient_shards(float* range, int64_t range_begin, const std::vector<Shard>& shards) {
  return per_shard(NcclOp::reduce, range, range_begin, shards);
}

NcclGroup broadcast_parameter_shards(float* range, int64_t range_begin, const std::vector<Shard>& shards) {
  return per_shard(NcclOp::broadcast, range, range_begin, shards);
}

}  // namespace vitpipe::cuda
