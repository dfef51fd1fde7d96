// The batcher under concurrent clients, with a stand-in model (each image's logits are sums of its own input), so
// ThreadSanitizer can run it (tests/tsan): no answer goes to the wrong request, no batch exceeds its bound, the
// metrics can be read while batches run, and stopping while clients submit leaves no request unanswered.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include "serve/inference_batcher.h"
#include "serve/serve_metrics.h"
#include "util/error.h"

namespace vitpipe {
namespace {

constexpr int64_t kFloats = 6;

struct StandInModel {
  std::atomic<int64_t> largest_batch{0};
  std::atomic<int64_t> images{0};
  std::vector<ImagePrediction> classify(const float* inputs, int64_t count) {
    int64_t seen = largest_batch.load();
    while (count > seen && !largest_batch.compare_exchange_weak(seen, count)) {
    }
    images += count;
    std::vector<ImagePrediction> out(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int64_t k = 0; k < kFloats; ++k) sum += inputs[i * kFloats + k];
      out[static_cast<size_t>(i)].logits = {sum, -sum};
      out[static_cast<size_t>(i)].probabilities = {0.5, 0.5};
    }
    return out;
  }
};

std::vector<float> input_of(int id) { return std::vector<float>(kFloats, static_cast<float>(id)); }

TEST(InferenceBatcherThreads, ConcurrentClientsGetTheirOwnAnswers) {
  StandInModel model;
  ServeMetrics metrics;
  InferenceBatcher batcher([&](const float* in, int64_t n) { return model.classify(in, n); }, kFloats, 8,
                           {8, std::chrono::milliseconds(2)}, &metrics);
  std::atomic<bool> reading{true};
  std::thread reader([&] {
    while (reading) {
      const std::string text = metrics.prometheus_text();
      EXPECT_NE(text.find("vitpipe_queue_depth"), std::string::npos);
    }
  });
  std::vector<std::thread> clients;
  std::atomic<int> wrong{0};
  for (int c = 0; c < 8; ++c)
    clients.emplace_back([&, c] {
      for (int r = 0; r < 50; ++r) {
        const int id = c * 1000 + r;
        const ImagePrediction p = batcher.submit(input_of(id)).get();
        if (p.logits.at(0) != static_cast<float>(id * kFloats)) ++wrong;
      }
    });
  for (auto& t : clients) t.join();
  reading = false;
  reader.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(model.images.load(), 400);
  EXPECT_LE(model.largest_batch.load(), 8);
  EXPECT_NE(metrics.prometheus_text().find("vitpipe_images_total 400\n"), std::string::npos);
}

TEST(InferenceBatcherThreads, StopWhileClientsSubmitAnswersEveryAcceptedRequest) {
  StandInModel model;
  InferenceBatcher batcher([&](const float* in, int64_t n) { return model.classify(in, n); }, kFloats, 4,
                           {4, std::chrono::milliseconds(1)}, nullptr);
  std::atomic<int> accepted{0}, answered{0}, refused{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (int r = 0; r < 200; ++r) {
        std::future<ImagePrediction> answer;
        try {
          answer = batcher.submit(input_of(c * 1000 + r));
        } catch (const Error&) {
          ++refused;
          return;
        }
        ++accepted;
        answer.get();
        ++answered;
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  batcher.stop();
  for (auto& t : clients) t.join();
  EXPECT_EQ(accepted.load(), answered.load());
  EXPECT_EQ(model.images.load(), accepted.load());
}

}  // namespace
}  // namespace vitpipe
