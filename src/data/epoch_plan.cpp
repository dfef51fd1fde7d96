#include "data/epoch_plan.h"

#include <algorithm>

#include "util/error.h"
#include "util/random.h"

namespace vitpipe {
namespace {

constexpr uint64_t kShuffleStream = 0x73687566666c65ull;  // "shuffle"

}  // namespace

std::vector<int64_t> epoch_order(const std::vector<int64_t>& items, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order = items;
  if (!shuffle) return order;
  Rng rng({seed, static_cast<uint64_t>(epoch), kShuffleStream});
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  return order;
}

EpochPlan::EpochPlan(const std::vector<int64_t>& items, int64_t epoch, const EpochPlanOptions& options)
    : epoch_(epoch) {
  VP_REQUIRE(options.global_batch_size > 0, "batch size must be positive, got ", options.global_batch_size);
  VP_REQUIRE(options.replica_count > 0 && options.replica_index >= 0 && options.replica_index < options.replica_count,
             "replica ", options.replica_index, " of ", options.replica_count, " is out of range");
  const std::vector<int64_t> order = epoch_order(items, options.seed, epoch, options.shuffle);
  const auto n = static_cast<int64_t>(order.size());
  const int64_t b = options.global_batch_size;
  const int64_t full = n / b;
  const int64_t rest = n - full * b;
  const int64_t count = full + ((rest > 0 && options.partial_batch == PartialBatch::use) ? 1 : 0);
  if (rest > 0 && options.partial_batch == PartialBatch::drop) dropped_ = rest;
  const int64_t r = options.replica_index, replicas = options.replica_count;
  batches_.resize(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    PlannedBatch& batch = batches_[static_cast<size_t>(k)];
    batch.index = k;
    batch.global_size = std::min(b, n - k * b);
    const int64_t begin = r * batch.global_size / replicas, end = (r + 1) * batch.global_size / replicas;
    batch.replica_offset = begin;
    batch.items.assign(order.begin() + k * b + begin, order.begin() + k * b + end);
  }
}

}  // namespace vitpipe
