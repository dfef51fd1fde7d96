// The NCCL calls of vitpipe's parallel layouts. Pipeline stages exchange a micro-batch's activations (forward) and
// their gradients (backward) with send/recv pairs on the compute stream, each in a group of its own so that two
// stages sending to each other at once cannot deadlock. Replicas sum gradients with one in-place all-reduce, or, with
// a sharded optimizer, reduce each shard to its owner: vitpipe's shards (parallel/optimizer_shards.h) are nearly,
// not exactly, equal, and ncclReduceScatter needs equal counts, so the shards are one grouped ncclReduce each, rooted
// at their owner (the bytes of a reduce-scatter, without padding); the updated shards come back as grouped
// ncclBroadcasts from their owners.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cuda/calls/nccl_call.h"
#include "backend/cuda/calls/row_major_matrix.h"

namespace vitpipe::cuda {

NcclGroup send_activations(const RowMajorMatrix& activations, int next_stage_rank);
NcclGroup recv_activations(const RowMajorMatrix& activations, int previous_stage_rank);

// The replicas' gradients of one bucket, summed in place (f32).
NcclGroup all_reduce_gradients(float* gradients, size_t count);

// A shard of a flat range: model offsets [begin, end), owned by the replica of the same index.
struct Shard {
  int64_t begin = 0, end = 0;
};
// `range` holds the model offsets [range_begin, ...) in f32; shard r is reduced onto replica r (in place).
NcclGroup reduce_gradient_shards(float* range, int64_t range_begin, const std::vector<Shard>& shards);
// ncclReduceScatter over shards of one size only (its count is per rank and equal on every rank): replica `rank`'s
// call, in place (its block of the range). Throws std::invalid_argument for unequal shards, as vitpipe's usually are
// (then reduce_gradient_shards).
NcclGroup reduce_scatter_gradients(float* range, int64_t range_begin, const std::vector<Shard>& shards, int rank);
// Shard r of `range` broadcast from replica r to every replica (in place).
NcclGroup broadcast_parameter_shards(float* range, int64_t range_begin, const std::vector<Shard>& shards);

}  // namespace vitpipe::cuda
