#include "serve/inference_batcher.h"

#include <algorithm>

#include "util/error.h"

namespace vitpipe {

InferenceBatcher::InferenceBatcher(Classify classify, int64_t input_floats, int64_t max_classify_batch, Options options,
                                   ServeMetrics* metrics)
    : classify_(std::move(classify)), input_floats_(input_floats), options_(options), metrics_(metrics) {
  VP_REQUIRE(options_.max_batch >= 1 && options_.max_batch <= max_classify_batch, "--max-batch: expected 1..",
             max_classify_batch, ", got ", options_.max_batch);
  thread_ = std::thread([this] { run(); });
}

InferenceBatcher::~InferenceBatcher() { stop(); }

std::future<ImagePrediction> InferenceBatcher::submit(std::vector<float> input) {
  VP_REQUIRE(static_cast<int64_t>(input.size()) == input_floats_, "submit: expected ", input_floats_, " floats, got ",
             input.size());
  std::future<ImagePrediction> future;
  {
    std::lock_guard lock(mutex_);
    VP_REQUIRE(!stopping_, "the server is shutting down");
    queue_.push_back({std::move(input), {}, std::chrono::steady_clock::now()});
    future = queue_.back().answer.get_future();
    if (metrics_) metrics_->set_queue_depth(static_cast<int64_t>(queue_.size()));
  }
  wake_.notify_one();
  return future;
}

int64_t InferenceBatcher::queue_depth() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

void InferenceBatcher::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void InferenceBatcher::run() {
  const int64_t floats = input_floats_;
  std::vector<float> inputs(static_cast<size_t>(options_.max_batch * floats));
  for (;;) {
    std::vector<Pending> batch;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping with nothing left
      // Wait for a full batch, at most max_delay after the oldest image arrived (not when stopping: drain).
      const auto deadline = queue_.front().queued + options_.max_delay;
      wake_.wait_until(lock, deadline,
                       [&] { return stopping_ || static_cast<int64_t>(queue_.size()) >= options_.max_batch; });
      const size_t n = std::min(queue_.size(), static_cast<size_t>(options_.max_batch));
      for (size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      if (metrics_) metrics_->set_queue_depth(static_cast<int64_t>(queue_.size()));
    }
    const int64_t count = static_cast<int64_t>(batch.size());
    for (int64_t i = 0; i < count; ++i)
      std::copy(batch[static_cast<size_t>(i)].input.begin(), batch[static_cast<size_t>(i)].input.end(),
                inputs.begin() + i * floats);
    try {
      std::vector<ImagePrediction> predictions = classify_(inputs.data(), count);
      if (metrics_) metrics_->record_batch(count);
      for (int64_t i = 0; i < count; ++i)
        batch[static_cast<size_t>(i)].answer.set_value(std::move(predictions[static_cast<size_t>(i)]));
    } catch (...) {
      for (Pending& p : batch) p.answer.set_exception(std::current_exception());
    }
  }
}

}  // namespace vitpipe
