#include "backend/cuda/calls/nccl_calls.h"

#include <cstdio>
#include <stdexcept>

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
  static const char* const kOps[] = {"send", "recv", "all_reduce", "reduce", "broadcast", "reduce_scatter"};
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

NcclGroup reduce_scatter_gradients(float* range, int64_t range_begin, const std::vector<Shard>& shards, int rank) {
  const int64_t count = shards.empty() ? 0 : shards[0].end - shards[0].begin;
  for (size_t r = 0; r < shards.size(); ++r) {
    if (shards[r].end - shards[r].begin != count ||
        shards[r].begin != shards[0].begin + static_cast<int64_t>(r) * count) {
      throw std::invalid_argument("reduce-scatter needs contiguous shards of one size; shard " + std::to_string(r) +
                                  " holds " + std::to_string(shards[r].end - shards[r].begin) + " elements, shard 0 " +
                                  std::to_string(count));
    }
  }
  float* base = range + (shards[0].begin - range_begin);
  return {{{NcclOp::reduce_scatter, base, base + rank * count, static_cast<size_t>(count), ElementType::f32, -1,
            NcclStream::communication}}};
}

NcclGroup broadcast_parameter_shards(float* range, int64_t range_begin, const std::vector<Shard>& shards) {
  return per_shard(NcclOp::broadcast, range, range_begin, shards);
}

}  // namespace vitpipe::cuda
