// What `GET /metrics` reports, in Prometheus' text exposition format (version 0.0.4): requests by route and status,
// a request latency histogram, the batch sizes the model ran, the queue depth and the images classified.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace vitpipe {

class ServeMetrics {
 public:
  static constexpr std::array<double, 12> kLatencyBuckets{0.005, 0.01, 0.025, 0.05, 0.1,  0.25,
                                                          0.5,   1.0,  2.5,   5.0,  10.0, 30.0};
  static constexpr std::array<double, 9> kBatchBuckets{1, 2, 4, 8, 16, 32, 64, 128, 256};

  void record_request(const std::string& route, int status, double seconds);
  // A connection or request refused before any route saw it (connection caps, header deadline, header size).
  void record_refusal(const std::string& reason);
  void record_batch(int64_t images);
  void set_queue_depth(int64_t depth);
  // Images classified per second over the last 10 seconds.
  double images_per_second() const;
  std::string prometheus_text() const;

 private:
  struct Histogram {
    std::vector<uint64_t> counts;  // cumulative counts are made when printing
    double sum = 0;
    uint64_t count = 0;
  };
  static void observe(Histogram& h, const double* bounds, size_t n, double value);

  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, Histogram> latency_;  // by route
  std::map<std::string, uint64_t> refusals_;  // by reason
  Histogram batches_;
  uint64_t images_ = 0;
  int64_t queue_depth_ = 0;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> recent_batches_;
};

}  // namespace vitpipe
