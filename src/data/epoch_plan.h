// Which items make up each batch of an epoch, for one data-parallel replica. The epoch's order is a seeded
// shuffle of the split (or the split in order); global batch k is order[k*B, (k+1)*B); replica r of R takes rows
// [r*b/R, (r+1)*b/R) of a global batch of b rows, so the replicas together see every row exactly once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vitpipe {

enum class PartialBatch : uint8_t {
  use,   // the last, smaller global batch is trained on
  drop,  // it is left out of this epoch, and the loader says so (never silently)
};

struct EpochPlanOptions {
  int64_t global_batch_size = 32;
  int replica_index = 0;
  int replica_count = 1;
  bool shuffle = true;
  uint64_t seed = 0;
  PartialBatch partial_batch = PartialBatch::use;
};

struct PlannedBatch {
  int64_t index = 0;           // global batch number within the epoch
  int64_t global_size = 0;     // rows of the global batch, over all replicas
  int64_t replica_offset = 0;  // where this replica's rows start within the global batch
  std::vector<int64_t> items;  // this replica's rows: dataset item indices
};

// The split's order in an epoch: `items` as given, or shuffled by Rng({seed, epoch, stream}) (Fisher-Yates).
std::vector<int64_t> epoch_order(const std::vector<int64_t>& items, uint64_t seed, int64_t epoch, bool shuffle);

class EpochPlan {
 public:
  EpochPlan(const std::vector<int64_t>& items, int64_t epoch, const EpochPlanOptions& options);
  int64_t epoch() const { return epoch_; }
  int64_t batches() const { return static_cast<int64_t>(batches_.size()); }
  const PlannedBatch& batch(int64_t k) const { return batches_[static_cast<size_t>(k)]; }
  int64_t dropped_items() const { return dropped_; }  // rows of a dropped partial global batch (all replicas)

 private:
  int64_t epoch_ = 0;
  std::vector<PlannedBatch> batches_;
  int64_t dropped_ = 0;
};

}  // namespace vitpipe
