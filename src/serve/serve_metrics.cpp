#include "serve/serve_metrics.h"

#include <cstdio>
#include <sstream>

namespace vitpipe {
namespace {

constexpr auto kRateWindow = std::chrono::seconds(10);

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

// A bucket bound as written in the label: the shortest form ("0.005", "+Inf" is written apart).
std::string bound(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

}  // namespace

void ServeMetrics::observe(Histogram& h, const double* bounds, size_t n, double value) {
  if (h.counts.empty()) h.counts.assign(n, 0);
  for (size_t i = 0; i < n; ++i)
    if (value <= bounds[i]) {
      ++h.counts[i];
      break;
    }
  h.sum += value;
  ++h.count;
}

void ServeMetrics::record_request(const std::string& route, int status, double seconds) {
  std::lock_guard lock(mutex_);
  ++requests_[{route, status}];
  observe(latency_[route], kLatencyBuckets.data(), kLatencyBuckets.size(), seconds);
}

void ServeMetrics::record_refusal(const std::string& reason) {
  std::lock_guard lock(mutex_);
  ++refusals_[reason];
}

void ServeMetrics::record_batch(int64_t images) {
  std::lock_guard lock(mutex_);
  observe(batches_, kBatchBuckets.data(), kBatchBuckets.size(), static_cast<double>(images));
  images_ += static_cast<uint64_t>(images);
  const auto now = std::chrono::steady_clock::now();
  recent_batches_.emplace_back(now, images);
  while (!recent_batches_.empty() && now - recent_batches_.front().first > kRateWindow) recent_batches_.pop_front();
}

void ServeMetrics::set_queue_depth(int64_t depth) {
  std::lock_guard lock(mutex_);
  queue_depth_ = depth;
}

double ServeMetrics::images_per_second() const {
  std::lock_guard lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  int64_t images = 0;
  for (const auto& [when, n] : recent_batches_)
    if (now - when <= kRateWindow) images += n;
  return static_cast<double>(images) / std::chrono::duration<double>(kRateWindow).count();
}

std::string ServeMetrics::prometheus_text() const {
  const double rate = images_per_second();
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  out << "# HELP vitpipe_http_requests_total HTTP requests answered, by route and status.\n"
         "# TYPE vitpipe_http_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out << "vitpipe_http_requests_total{route=\"" << key.first << "\",status=\"" << key.second << "\"} " << n << "\n";
  out << "# HELP vitpipe_http_refused_total Connections and requests refused before a route saw them, by reason.\n"
         "# TYPE vitpipe_http_refused_total counter\n";
  for (const auto& [reason, n] : refusals_)
    out << "vitpipe_http_refused_total{reason=\"" << reason << "\"} " << n << "\n";
  out << "# HELP vitpipe_http_request_duration_seconds Time from a request's arrival to its answer.\n"
         "# TYPE vitpipe_http_request_duration_seconds histogram\n";
  for (const auto& [route, h] : latency_) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < kLatencyBuckets.size(); ++i) {
      cumulative += h.counts[i];
      out << "vitpipe_http_request_duration_seconds_bucket{route=\"" << route << "\",le=\"" << bound(kLatencyBuckets[i])
          << "\"} " << cumulative << "\n";
    }
    out << "vitpipe_http_request_duration_seconds_bucket{route=\"" << route << "\",le=\"+Inf\"} " << h.count << "\n"
        << "vitpipe_http_request_duration_seconds_sum{route=\"" << route << "\"} " << number(h.sum) << "\n"
        << "vitpipe_http_request_duration_seconds_count{route=\"" << route << "\"} " << h.count << "\n";
  }
  out << "# HELP vitpipe_batch_size Images per forward pass of the model.\n# TYPE vitpipe_batch_size histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBatchBuckets.size(); ++i) {
    cumulative += batches_.counts.empty() ? 0 : batches_.counts[i];
    out << "vitpipe_batch_size_bucket{le=\"" << bound(kBatchBuckets[i]) << "\"} " << cumulative << "\n";
  }
  out << "vitpipe_batch_size_bucket{le=\"+Inf\"} " << batches_.count << "\n"
      << "vitpipe_batch_size_sum " << number(batches_.sum) << "\n"
      << "vitpipe_batch_size_count " << batches_.count << "\n";
  out << "# HELP vitpipe_queue_depth Images waiting for the model.\n# TYPE vitpipe_queue_depth gauge\n"
      << "vitpipe_queue_depth " << queue_depth_ << "\n";
  out << "# HELP vitpipe_images_total Images classified.\n# TYPE vitpipe_images_total counter\n"
      << "vitpipe_images_total " << images_ << "\n";
  out << "# HELP vitpipe_images_per_second Images classified per second over the last 10 seconds.\n"
         "# TYPE vitpipe_images_per_second gauge\n"
      << "vitpipe_images_per_second " << number(rate) << "\n";
  return out.str();
}

}  // namespace vitpipe
