// ZeRO stage 1 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"):
// the replicas of a pipeline stage split the stage's flat parameter range into contiguous shards, one each. A
// replica keeps optimizer moments for its shard only and updates only it; the gradients are reduce-scattered to
// the shards' owners instead of all-reduced, and the updated parameters all-gathered back (gradient_buckets.h,
// parameter_gather.h). Memory for the moments falls as 1/replicas; the bytes on the wire stay those of an
// all-reduce (a reduce-scatter plus an all-gather).
#pragma once

#include <cstdint>
#include <vector>

namespace vitpipe {

struct ElementRange {
  int64_t begin = 0;  // model offsets, [begin, end)
  int64_t end = 0;
  int64_t numel() const { return end - begin; }
  bool contains(int64_t offset) const { return offset >= begin && offset < end; }
  bool operator==(const ElementRange&) const = default;
};

// [begin, end) cut into `parts` contiguous shards, in order, of nearly equal size, every inner boundary on a
// multiple of `align` (model offsets: an optimizer's fixed chunks then fall the same whether it is sharded or not).
// A shard is empty when the range has fewer aligned chunks than parts.
std::vector<ElementRange> shard_ranges(int64_t begin, int64_t end, int parts, int64_t align);

}  // namespace vitpipe
