#include "data/loader.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#include "util/error.h"
#include "util/log.h"

namespace vitpipe {

LoaderOptions training_loader_options(int64_t global_batch_size, uint64_t seed) {
  LoaderOptions options;
  options.global_batch_size = global_batch_size;
  options.seed = seed;
  return options;
}

LoaderOptions evaluation_loader_options(int64_t global_batch_size) {
  LoaderOptions options;
  options.global_batch_size = global_batch_size;
  options.shuffle = false;
  options.augment = false;
  options.partial_batch = PartialBatch::use;
  return options;
}

// Image buffers are recycled: a fresh multi-megabyte allocation per batch would page-fault on every write.
struct Loader::BufferPool {
  std::mutex mutex;
  size_t bytes = 0;
  std::vector<void*> free;
  ~BufferPool() {
    for (void* p : free) std::free(p);
  }
  static std::shared_ptr<void> acquire(const std::shared_ptr<BufferPool>& pool) {
    void* p = nullptr;
    {
      std::lock_guard lock(pool->mutex);
      if (!pool->free.empty()) {
        p = pool->free.back();
        pool->free.pop_back();
      }
    }
    if (p == nullptr) {
      p = std::aligned_alloc(kTensorAlignment, std::max<size_t>(kTensorAlignment, pool->bytes));
      VP_REQUIRE(p != nullptr, "loader: out of memory for a batch of ", pool->bytes, " bytes");
      ::madvise(p, pool->bytes, MADV_HUGEPAGE);
    }
    std::weak_ptr<BufferPool> weak = pool;
    return std::shared_ptr<void>(p, [weak](void* q) {
      if (auto alive = weak.lock()) {
        std::lock_guard lock(alive->mutex);
        alive->free.push_back(q);
      } else {
        std::free(q);
      }
    });
  }
};

struct Loader::Slot {
  int64_t batch = -1;  // batch number held; -1: free
  int64_t rows = 0;
  int64_t rows_done = 0;
  std::shared_ptr<void> images;
  std::vector<std::string> errors;  // per row; empty = fine
};

Loader::Loader(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> items, const PreprocessorConfig& config,
               const LoaderOptions& options)
    : dataset_(std::move(dataset)),
      items_(std::move(items)),
      options_(options),
      transform_(dataset_, config, options.augment, options.augmentation, options.seed),
      sample_floats_(transform_.sample_floats()),
      weighted_(dataset_->multi_label() && dataset_->has_masked_labels()) {
  VP_REQUIRE(options_.global_batch_size > 0, "batch size must be positive");
  VP_REQUIRE(
      options_.replica_count > 0 && options_.replica_index >= 0 && options_.replica_index < options_.replica_count,
      "replica ", options_.replica_index, " of ", options_.replica_count, " is out of range");
  VP_REQUIRE(options_.threads > 0, "loader threads must be positive, got ", options_.threads);
  VP_REQUIRE(options_.prefetch > 0, "loader prefetch must be positive, got ", options_.prefetch);
  for (int64_t i : items_) VP_REQUIRE(i >= 0 && i < dataset_->size(), "loader: item ", i, " is not in the dataset");
  // Decoding a file takes milliseconds: hand out single rows. Cached pixels take microseconds: hand out a few.
  const bool cached = dataset_->stored_image_size() > 0;
  rows_per_claim_ = cached ? 4 : 1;
  const int64_t max_rows = (options_.global_batch_size + options_.replica_count - 1) / options_.replica_count;
  pool_ = std::make_shared<BufferPool>();
  pool_->bytes = static_cast<size_t>(max_rows * sample_floats_) * sizeof(float);
  for (int k = 0; k < options_.prefetch; ++k) slots_.push_back(std::make_unique<Slot>());
  for (int t = 0; t < options_.threads; ++t) threads_.emplace_back([this] { worker_loop(); });
}

Loader::~Loader() {
  stop_workers();
  if (skipped_total_ > 0) warn(skipped_total_, " unreadable images were skipped");
}

void Loader::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

int64_t Loader::batches_per_epoch() const {
  const auto n = static_cast<int64_t>(items_.size());
  const int64_t b = options_.global_batch_size;
  return n / b + ((n % b != 0 && options_.partial_batch == PartialBatch::use) ? 1 : 0);
}

int64_t Loader::skipped_unreadable() const {
  std::lock_guard lock(mutex_);
  return skipped_total_;
}

int64_t Loader::dropped_partial_items() const {
  std::lock_guard lock(mutex_);
  return plan_ ? plan_->dropped_items() : 0;
}

void Loader::start_epoch(int64_t epoch, int64_t first_batch) {
  std::unique_lock lock(mutex_);
  ++generation_;
  idle_.wait(lock, [&] { return in_flight_ == 0; });
  for (auto& slot : slots_) *slot = Slot();
  EpochPlanOptions plan_options;
  plan_options.global_batch_size = options_.global_batch_size;
  plan_options.replica_index = options_.replica_index;
  plan_options.replica_count = options_.replica_count;
  plan_options.shuffle = options_.shuffle;
  plan_options.seed = options_.seed;
  plan_options.partial_batch = options_.partial_batch;
  plan_ = std::make_unique<EpochPlan>(items_, epoch, plan_options);
  VP_REQUIRE(first_batch >= 0 && first_batch <= plan_->batches(), "cannot resume epoch ", epoch, " at batch ",
             first_batch, ": it has ", plan_->batches(), " batches");
  if (plan_->dropped_items() > 0)
    info("epoch ", epoch, ": the last ", plan_->dropped_items(), " of ", items_.size(),
         " images do not fill a global batch of ", options_.global_batch_size,
         " and are left out of this epoch (the partial-batch policy is `drop`)");
  next_to_deliver_ = first_batch;
  claim_batch_ = first_batch;
  claim_row_ = 0;
  lock.unlock();
  work_ready_.notify_all();
}

void Loader::worker_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [&] {
      return stopping_ ||
             (plan_ && claim_batch_ < plan_->batches() && claim_batch_ < next_to_deliver_ + options_.prefetch);
    });
    if (stopping_) return;
    const int64_t k = claim_batch_;
    Slot& slot = *slots_[static_cast<size_t>(k % options_.prefetch)];
    const PlannedBatch& planned = plan_->batch(k);
    if (slot.batch != k) {  // first rows of this batch: the slot was freed when its last batch was delivered
      slot.batch = k;
      slot.rows = static_cast<int64_t>(planned.items.size());
      slot.rows_done = 0;
      slot.errors.assign(planned.items.size(), std::string());
      slot.images = BufferPool::acquire(pool_);
    }
    const int64_t begin = claim_row_, end = std::min(slot.rows, claim_row_ + rows_per_claim_);
    claim_row_ = end;
    if (end >= slot.rows) {
      ++claim_batch_;
      claim_row_ = 0;
    }
    if (slot.rows == 0) {  // this replica has no rows of a tiny last batch
      batch_ready_.notify_all();
      continue;
    }
    const int64_t generation = generation_;
    const int64_t epoch = plan_->epoch();
    float* images = static_cast<float*>(slot.images.get());
    std::vector<std::string> errors(static_cast<size_t>(end - begin));
    ++in_flight_;
    lock.unlock();
    for (int64_t row = begin; row < end; ++row) {
      try {
        transform_.apply(planned.items[static_cast<size_t>(row)], epoch, images + row * sample_floats_);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(row - begin)] = e.what();
        if (errors[static_cast<size_t>(row - begin)].empty()) errors[static_cast<size_t>(row - begin)] = "unreadable";
      }
    }
    lock.lock();
    --in_flight_;
    if (generation == generation_) {
      for (int64_t row = begin; row < end; ++row)
        slot.errors[static_cast<size_t>(row)] = std::move(errors[static_cast<size_t>(row - begin)]);
      slot.rows_done += end - begin;
      if (slot.rows_done == slot.rows) batch_ready_.notify_all();
    }
    if (in_flight_ == 0) idle_.notify_all();
  }
}

bool Loader::next(Batch* batch) {
  std::unique_lock lock(mutex_);
  VP_REQUIRE(plan_ != nullptr, "Loader::next before start_epoch");
  if (next_to_deliver_ >= plan_->batches()) return false;
  const int64_t k = next_to_deliver_;
  Slot& slot = *slots_[static_cast<size_t>(k % options_.prefetch)];
  batch_ready_.wait(lock, [&] { return slot.batch == k && slot.rows_done == slot.rows; });
  std::shared_ptr<void> images = std::move(slot.images);
  std::vector<std::string> errors = std::move(slot.errors);
  slot = Slot();
  ++next_to_deliver_;
  const PlannedBatch& planned = plan_->batch(k);
  const int64_t epoch = plan_->epoch();
  lock.unlock();
  work_ready_.notify_all();

  // Unreadable rows: the first one stops the run, or (skip_unreadable) they are warned about and compacted out.
  std::vector<int64_t> keep;
  keep.reserve(planned.items.size());
  int64_t skipped = 0;
  for (size_t row = 0; row < planned.items.size(); ++row) {
    if (errors[row].empty()) {
      keep.push_back(static_cast<int64_t>(row));
      continue;
    }
    VP_REQUIRE(options_.skip_unreadable, errors[row], " (pass --skip-unreadable to skip such images)");
    warn("skipping unreadable image: ", errors[row]);
    ++skipped;
  }
  if (skipped > 0) {
    std::lock_guard guard(mutex_);
    skipped_total_ += skipped;
  }
  float* data = static_cast<float*>(images.get());
  for (size_t r = 0; r < keep.size(); ++r)
    if (keep[r] != static_cast<int64_t>(r))
      std::copy_n(data + keep[r] * sample_floats_, sample_floats_, data + static_cast<int64_t>(r) * sample_floats_);

  const auto rows = static_cast<int64_t>(keep.size());
  batch->images =
      images ? Tensor::wrap(data, {rows, 3, transform_.image_height(), transform_.image_width()}, DType::f32, images)
             : Tensor::empty({0, 3, transform_.image_height(), transform_.image_width()});
  batch->labels = Tensor::zeros({rows, dataset_->num_labels()});
  batch->label_weights = weighted_ ? Tensor::empty({rows, dataset_->num_labels()}) : Tensor();
  batch->indices.resize(static_cast<size_t>(rows));
  batch->classes.clear();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t item = planned.items[static_cast<size_t>(keep[static_cast<size_t>(r)])];
    batch->indices[static_cast<size_t>(r)] = item;
    dataset_->write_labels(item, batch->labels.f32() + r * dataset_->num_labels());
    if (weighted_) dataset_->write_label_weights(item, batch->label_weights.f32() + r * dataset_->num_labels());
    if (!dataset_->multi_label()) batch->classes.push_back(dataset_->class_index(item));
  }
  batch->epoch = epoch;
  batch->index = k;
  batch->global_size = planned.global_size;
  batch->skipped = skipped;
  return true;
}

}  // namespace vitpipe
