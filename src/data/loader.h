// The data loader: a pool of threads turns dataset items into ready batches ahead of the trainer, holding at most
// `prefetch` batches in memory. Per epoch the order is a seeded shuffle (EpochPlan); each data-parallel replica gets
// its slice of every global batch; an epoch can start at any batch (resuming from a checkpoint). Batches come out in
// order and their pixels depend only on (seed, epoch, item): never on threads, replicas or timing.
//
//   Loader loader(dataset, dataset->split_indices(Split::train), preprocessor_config, options);
//   for (int64_t epoch = start_epoch; epoch < epochs; ++epoch) {
//     loader.start_epoch(epoch, epoch == start_epoch ? start_batch : 0);
//     Batch batch;
//     while (loader.next(&batch)) { ... batch.images, batch.labels ... }
//   }
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/augmentation.h"
#include "data/dataset.h"
#include "data/epoch_plan.h"
#include "data/sample_transform.h"
#include "io/preprocessor_config.h"
#include "tensor/tensor.h"

namespace vitpipe {

struct Batch {
  Tensor images;                 // [b, 3, S, S] f32, normalised as the model's preprocessor config says
  Tensor labels;                 // [b, L] f32: multi-hot (single-label: one-hot)
  Tensor label_weights;          // [b, L] f32: 1 known, 0 masked; only when the dataset has masked labels
  std::vector<int64_t> classes;  // single-label: the class of each row; empty for multi-label
  std::vector<int64_t> indices;  // dataset item of each row
  int64_t epoch = 0;
  int64_t index = 0;        // global batch number within the epoch
  int64_t global_size = 0;  // rows of the global batch over all replicas (before skipped rows)
  int64_t skipped = 0;      // rows of this replica left out as unreadable (skip_unreadable)

  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

struct LoaderOptions {
  int64_t global_batch_size = 32;
  int replica_index = 0;
  int replica_count = 1;
  uint64_t seed = 0;
  bool shuffle = true;  // evaluation: false
  bool augment = true;  // evaluation: false (then exactly ViTImageProcessor)
  AugmentationSettings augmentation;
  PartialBatch partial_batch = PartialBatch::use;  // evaluation: always use
  int threads = 2;                                 // loader threads (they do not use OpenMP)
  int prefetch = 4;                                // ready batches held ahead of the consumer
  bool skip_unreadable = false;                    // an unreadable image: warn and leave the row out instead of failing
};

// Training: shuffle + augment with the given settings. Evaluation: every item once, in order, unaugmented.
LoaderOptions training_loader_options(int64_t global_batch_size, uint64_t seed);
LoaderOptions evaluation_loader_options(int64_t global_batch_size);

class Loader {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> items, const PreprocessorConfig& config,
         const LoaderOptions& options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Global batches per epoch (the same for every replica; a dropped partial batch is not counted).
  int64_t batches_per_epoch() const;
  int64_t items() const { return static_cast<int64_t>(items_.size()); }
  bool label_weights() const { return weighted_; }  // batches carry label_weights

  // Begins producing epoch `epoch` from global batch `first_batch` (0, or where a checkpoint stopped).
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of this replica, in order; false at the end of the epoch. Throws the first unreadable image's
  // error (naming the file) unless skip_unreadable. A Batch's tensors stay valid as long as the caller keeps them.
  bool next(Batch* batch);

  int64_t skipped_unreadable() const;     // over the loader's life
  int64_t dropped_partial_items() const;  // in the current epoch (PartialBatch::drop)

 private:
  struct Slot;
  struct BufferPool;
  void worker_loop();
  void stop_workers();

  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> items_;
  LoaderOptions options_;
  SampleTransform transform_;
  int64_t sample_floats_;
  int64_t rows_per_claim_;
  bool weighted_;

  std::shared_ptr<BufferPool> pool_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_, batch_ready_, idle_;
  std::unique_ptr<EpochPlan> plan_;
  std::vector<std::unique_ptr<Slot>> slots_;  // prefetch ring: batch k lives in slot k % prefetch
  int64_t next_to_deliver_ = 0;               // batch number the consumer gets next
  int64_t claim_batch_ = 0, claim_row_ = 0;   // next work to hand to a thread
  int64_t in_flight_ = 0;                     // row ranges being processed now
  int64_t generation_ = 0;
  bool stopping_ = false;
  int64_t skipped_total_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace vitpipe
