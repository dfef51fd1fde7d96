// Dynamic batching: images submitted by concurrent requests wait until `max_batch` are queued or the first has
// waited `max_delay`, then run through the model together on one thread. Each answer is the same whatever batch it
// rode in (the model runs images independently; GEMM blocking may change the last bits, within 1e-5).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "inference/image_classifier.h"
#include "serve/serve_metrics.h"

namespace vitpipe {

class InferenceBatcher {
 public:
  struct Options {
    int64_t max_batch = 16;  // at most the classifier's max_batch
    std::chrono::microseconds max_delay{5000};
  };

  // Runs `count` preprocessed images laid out one after another (ImageClassifier::classify); called on the
  // batcher's thread only.
  using Classify = std::function<std::vector<ImagePrediction>(const float* inputs, int64_t count)>;

  // `classifier` and `metrics` (may be null) must outlive the batcher. (Inline: the ThreadSanitizer build links the
  // batcher without the model.)
  InferenceBatcher(ImageClassifier& classifier, Options options, ServeMetrics* metrics)
      : InferenceBatcher(
            [&classifier](const float* inputs, int64_t count) { return classifier.classify(inputs, count); },
            classifier.input_floats(), classifier.max_batch(), options, metrics) {}
  // Any model: `input_floats` per image, at most `max_classify_batch` images per call.
  InferenceBatcher(Classify classify, int64_t input_floats, int64_t max_classify_batch, Options options,
                   ServeMetrics* metrics);
  ~InferenceBatcher();
  InferenceBatcher(const InferenceBatcher&) = delete;
  InferenceBatcher& operator=(const InferenceBatcher&) = delete;

  // Queues one preprocessed image (classifier.input_floats() floats). The future throws what the model threw.
  std::future<ImagePrediction> submit(std::vector<float> input);
  int64_t queue_depth() const;
  int64_t max_batch() const { return options_.max_batch; }
  // Runs what is queued, then joins the thread; later submissions throw vitpipe::Error.
  void stop();

 private:
  struct Pending {
    std::vector<float> input;
    std::promise<ImagePrediction> answer;
    std::chrono::steady_clock::time_point queued;
  };
  void run();

  Classify classify_;
  int64_t input_floats_;
  Options options_;
  ServeMetrics* metrics_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace vitpipe
