#include "parallel/parameter_gather.h"

#include <algorithm>
#include <chrono>

#include "parallel/trace.h"
#include "util/error.h"

namespace vitpipe {
namespace {

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct ParameterGather::Flight {
  CommRequest request;
  bool launched = false;
  bool completed = false;
  int64_t launch_ns = 0;
};

ParameterGather::ParameterGather(std::vector<FlatParameters> parameters, std::vector<GradientBucket> buckets,
                                 Communicator* group, TraceRecorder* trace, int trace_lane,
                                 std::vector<DeviceReducer*> device_collectives)
    : parameters_(std::move(parameters)),
      buckets_(std::move(buckets)),
      device_collectives_(std::move(device_collectives)),
      group_(group),
      trace_(trace),
      trace_lane_(trace_lane) {
  for (const GradientBucket& bucket : buckets_) {
    VP_REQUIRE(bucket.owner >= 0, "parameter gather: every bucket needs an owner (a sharded optimizer's buckets)");
    VP_REQUIRE(bucket.chunk >= 0 && bucket.chunk < static_cast<int>(parameters_.size()),
               "parameter gather: bucket of chunk ", bucket.chunk, " outside the ", parameters_.size(), " chunks");
  }
  std::sort(buckets_.begin(), buckets_.end(), [](const GradientBucket& a, const GradientBucket& b) {
    return a.chunk != b.chunk ? a.chunk < b.chunk : a.begin < b.begin;
  });
  VP_REQUIRE(device_collectives_.empty() || device_collectives_.size() == parameters_.size(),
             "parameter gather: ", device_collectives_.size(), " device collectives for ", parameters_.size(),
             " chunks");
  for (size_t c = 0; c < parameters_.size(); ++c) {
    VP_REQUIRE(!group_ || group_->size() <= 1 || this->device_collectives(static_cast<int>(c)) != nullptr ||
                   parameters_[c].flat().device() == Device::cpu,
               "parameter gather: chunk ", c, "'s parameters are device memory and it has no device collectives");
  }
  flights_.resize(buckets_.size());
  for (const FlatParameters& p : parameters_) {
    delivered_.emplace_back(static_cast<size_t>(p.last_segment() - p.first_segment() + 1), true);
  }
}

ParameterGather::~ParameterGather() = default;

DeviceReducer* ParameterGather::device_collectives(int chunk) const {
  return device_collectives_.empty() ? nullptr : device_collectives_[static_cast<size_t>(chunk)];
}

void ParameterGather::complete_chunk_on_device(int chunk, int64_t now_ns) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b].chunk == chunk && flights_[b].launched && !flights_[b].completed) complete(b, now_ns);
  }
}

void ParameterGather::start() {
  VP_REQUIRE(!in_flight_, "parameter gather: start() while the previous gather is in flight");
  in_flight_ = true;
  blocked_ns_ = 0;
  stats_ = ParameterGatherStats{};
  for (auto& d : delivered_) std::fill(d.begin(), d.end(), false);
  first_launch_ns_ = wall_ns();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Flight& flight = flights_[b];
    flight = Flight{};
    flight.launched = true;
    flight.launch_ns = wall_ns();
    const GradientBucket& bucket = buckets_[b];
    stats_.bytes += bucket.bytes();
    if (DeviceReducer* device = device_collectives(bucket.chunk); device != nullptr) {
      if (group_ && group_->size() > 1) {
        device->broadcast(parameters_[static_cast<size_t>(bucket.chunk)].flat().slice(bucket.begin, bucket.end),
                          bucket.owner);
      }
    } else if (group_ && group_->size() > 1) {
      flight.request = group_->ibroadcast(parameters_[static_cast<size_t>(bucket.chunk)].data() + bucket.begin,
                                          static_cast<size_t>(bucket.end - bucket.begin), bucket.owner);
    }
    blocked_ns_ += wall_ns() - flight.launch_ns;
  }
}

void ParameterGather::complete(size_t b, int64_t now_ns) {
  Flight& flight = flights_[b];
  flight.completed = true;
  if (trace_ && trace_->enabled()) {
    const int64_t trace_now = trace_->now_ns();
    trace_->record("all-gather", kTraceAllReduce, trace_now - (now_ns - flight.launch_ns), trace_now, trace_lane_, -1,
                   static_cast<int64_t>(b), static_cast<int64_t>(buckets_[b].bytes()));
  }
  stats_.window_seconds = static_cast<double>(now_ns - first_launch_ns_) * 1e-9;
}

void ParameterGather::poll() {
  for (int chunk = 0; chunk < static_cast<int>(device_collectives_.size()); ++chunk) {
    DeviceReducer* device = device_collectives(chunk);
    if (device == nullptr) continue;
    const int64_t start = wall_ns();
    const bool done = device->done();
    const int64_t end = wall_ns();
    blocked_ns_ += end - start;
    if (done) complete_chunk_on_device(chunk, end);
  }
  for (size_t b = 0; b < flights_.size(); ++b) {
    Flight& flight = flights_[b];
    if (!flight.launched || flight.completed || device_collectives(buckets_[b].chunk) != nullptr) continue;
    const int64_t start = wall_ns();
    const bool done = flight.request.test();
    const int64_t end = wall_ns();
    blocked_ns_ += end - start;
    if (done) complete(b, end);
  }
}

bool ParameterGather::wait_segment(int chunk, int segment) {
  if (!in_flight_) return false;
  const FlatParameters& range = parameters_.at(static_cast<size_t>(chunk));
  VP_REQUIRE(segment >= range.first_segment() && segment <= range.last_segment(), "parameter gather: segment ", segment,
             " is not held by chunk ", chunk);
  poll();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const GradientBucket& bucket = buckets_[b];
    Flight& flight = flights_[b];
    if (bucket.chunk != chunk || segment < bucket.first_segment || segment > bucket.last_segment) continue;
    if (!flight.completed) {
      const int64_t start = wall_ns();
      DeviceReducer* device = device_collectives(chunk);
      if (device != nullptr) {
        device->wait();
      } else {
        flight.request.wait();
      }
      const int64_t end = wall_ns();
      blocked_ns_ += end - start;
      if (device != nullptr) {
        complete_chunk_on_device(chunk, end);
      } else {
        complete(b, end);
      }
    }
  }
  auto& delivered = delivered_[static_cast<size_t>(chunk)];
  const size_t index = static_cast<size_t>(segment - range.first_segment());
  const bool first = !delivered[index];
  delivered[index] = true;
  bool all = true;
  for (const auto& d : delivered_) all = all && std::all_of(d.begin(), d.end(), [](bool x) { return x; });
  if (all) {
    // Every segment was waited for, so every bucket completed.
    in_flight_ = false;
    stats_.exposed_seconds = static_cast<double>(blocked_ns_) * 1e-9;
  }
  return first;
}

}  // namespace vitpipe
