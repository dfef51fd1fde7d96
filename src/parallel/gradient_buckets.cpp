#include "parallel/gradient_buckets.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "parallel/comm_deadline.h"
#include "parallel/trace.h"
#include "util/error.h"

namespace vitpipe {

std::vector<GradientBucket> make_gradient_buckets(const std::vector<FlatParameters>& ranges, size_t bucket_bytes,
                                                  const std::vector<std::vector<ElementRange>>& shards) {
  VP_REQUIRE(bucket_bytes > 0, "the gradient bucket size must be positive");
  VP_REQUIRE(shards.empty() || shards.size() == ranges.size(), "gradient buckets: ", shards.size(), " shard lists for ",
             ranges.size(), " gradient ranges");
  std::vector<GradientBucket> buckets;
  // Later chunks finish their backward first (interleaved 1F1B), so they come first too.
  for (int chunk = static_cast<int>(ranges.size()) - 1; chunk >= 0; --chunk) {
    const FlatParameters& range = ranges[static_cast<size_t>(chunk)];
    const auto specs = range.held_specs();
    const std::vector<ElementRange>* owners = shards.empty() ? nullptr : &shards[static_cast<size_t>(chunk)];
    GradientBucket open;
    bool has_open = false;
    for (auto it = specs.rbegin(); it != specs.rend(); ++it) {
      const ParamSpec& spec = **it;
      // The parameter, cut where shards meet (last piece first): [piece_begin, piece_end) in model offsets.
      for (int64_t piece_end = spec.offset + spec.numel; piece_end > spec.offset;) {
        int owner = -1;
        int64_t piece_begin = spec.offset;
        if (owners) {
          for (size_t r = 0; r < owners->size(); ++r) {
            const ElementRange& shard = (*owners)[r];
            if (shard.numel() > 0 && shard.contains(piece_end - 1)) {
              owner = static_cast<int>(r);
              piece_begin = std::max(spec.offset, shard.begin);
            }
          }
          VP_REQUIRE(owner >= 0, "gradient buckets: element ", piece_end - 1, " lies in no shard");
        }
        const int64_t begin = piece_begin - range.begin(), end = piece_end - range.begin();
        if (has_open && open.owner != owner) {
          buckets.push_back(open);
          has_open = false;
        }
        if (!has_open) {
          open = GradientBucket{chunk, begin, end, spec.segment, spec.segment, owner};
          has_open = true;
        } else {
          open.begin = begin;  // contiguous: growing towards the front
          open.first_segment = spec.segment;
        }
        if (open.bytes() >= bucket_bytes) {
          buckets.push_back(open);
          has_open = false;
        }
        piece_end = piece_begin;
      }
    }
    if (has_open) buckets.push_back(open);
  }
  return buckets;
}

struct GradientBuckets::Flight {
  CommRequest request;
  bool launched = false;
  bool completed = false;
  int64_t launch_ns = 0;
  int64_t completion_ns = 0;
};

namespace {
int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

GradientBuckets::GradientBuckets(std::vector<FlatParameters> gradients, Communicator* group,
                                 GradientBucketOptions options, TraceRecorder* trace)
    : gradients_(std::move(gradients)), group_(group), options_(options), trace_(trace) {
  VP_REQUIRE(!gradients_.empty(), "GradientBuckets needs at least one gradient range");
  buckets_ = make_gradient_buckets(gradients_, options_.bucket_bytes, options_.shards);
  for (const auto& g : gradients_) {
    ready_.emplace_back(static_cast<size_t>(g.last_segment() - g.first_segment() + 1), false);
  }
  flights_.resize(buckets_.size());
  VP_REQUIRE(options_.backends.empty() || options_.backends.size() == gradients_.size(),
             "gradient buckets: ", options_.backends.size(), " backends for ", gradients_.size(), " gradient ranges");
  VP_REQUIRE(options_.nccl.empty() || options_.nccl.size() == gradients_.size(),
             "gradient buckets: ", options_.nccl.size(), " NCCL groups for ", gradients_.size(), " gradient ranges");
  host_.resize(gradients_.size());
  for (size_t c = 0; c < options_.backends.size(); ++c) {
    Backend* backend = options_.backends[c];
    if (backend != nullptr && !backend->host_accessible() && group_ && group_->size() > 1 &&
        nccl(static_cast<int>(c)) == nullptr) {
      host_[c].resize(static_cast<size_t>(gradients_[c].numel()));  // taken once, reused every step
    }
  }
}

float* GradientBuckets::host_data(int chunk) {
  return mirrored(chunk) ? host_[static_cast<size_t>(chunk)].data() : gradients_[static_cast<size_t>(chunk)].data();
}

GradientBuckets::~GradientBuckets() = default;

bool GradientBuckets::launched(size_t bucket) const { return flights_.at(bucket).launched; }

void GradientBuckets::mark_ready(int segment, int chunk) {
  VP_REQUIRE(chunk >= 0 && chunk < static_cast<int>(gradients_.size()), "gradient chunk ", chunk, " is outside [0, ",
             gradients_.size(), ")");
  const FlatParameters& range = gradients_[static_cast<size_t>(chunk)];
  VP_REQUIRE(segment >= range.first_segment() && segment <= range.last_segment(), "segment ", segment,
             " is not held by gradient chunk ", chunk, " (segments ", range.first_segment(), "..", range.last_segment(),
             ")");
  auto& ready = ready_[static_cast<size_t>(chunk)];
  ready[static_cast<size_t>(segment - range.first_segment())] = true;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const GradientBucket& bucket = buckets_[b];
    if (flights_[b].launched || bucket.chunk != chunk) continue;
    bool all = true;
    for (int s = bucket.first_segment; s <= bucket.last_segment && all; ++s) {
      all = ready[static_cast<size_t>(s - range.first_segment())];
    }
    if (all) launch(b);
  }
  poll();
}

void GradientBuckets::launch(size_t b) {
  Flight& flight = flights_[b];
  flight.launched = true;
  flight.launch_ns = wall_ns();
  if (first_launch_ns_ < 0) first_launch_ns_ = flight.launch_ns;
  const GradientBucket& bucket = buckets_[b];
  if (DeviceReducer* on_gpus = nccl(bucket.chunk); on_gpus != nullptr && group_ && group_->size() > 1) {
    // Enqueued after the backward kernels the backend already has; the host does not wait here.
    const Tensor slice = gradients_[static_cast<size_t>(bucket.chunk)].flat().slice(bucket.begin, bucket.end);
    if (bucket.owner < 0) {
      on_gpus->allreduce_sum(slice);
    } else {
      on_gpus->reduce_sum(slice, bucket.owner);
    }
    blocked_ns_ += wall_ns() - flight.launch_ns;
  } else if (group_ && group_->size() > 1) {
    if (mirrored(bucket.chunk)) {
      options_.backends[static_cast<size_t>(bucket.chunk)]->copy_to_host(
          gradients_[static_cast<size_t>(bucket.chunk)].flat().slice(bucket.begin, bucket.end),
          Tensor::wrap(host_data(bucket.chunk) + bucket.begin, {bucket.end - bucket.begin}, DType::f32));
    }
    float* data = host_data(bucket.chunk) + bucket.begin;
    const auto count = static_cast<size_t>(bucket.end - bucket.begin);
    flight.request =
        bucket.owner < 0 ? group_->iallreduce_sum(data, count) : group_->ireduce_sum(data, count, bucket.owner);
    blocked_ns_ += wall_ns() - flight.launch_ns;
  }
}

void GradientBuckets::complete(size_t b, int64_t now_ns) {
  Flight& flight = flights_[b];
  flight.completed = true;
  flight.completion_ns = now_ns;
  if (trace_ && trace_->enabled()) {
    // The trace's clock has its own origin: translate through "now".
    const int64_t trace_now = trace_->now_ns();
    trace_->record(buckets_[b].owner < 0 ? "allreduce" : "reduce-scatter", kTraceAllReduce,
                   trace_now - (now_ns - flight.launch_ns), trace_now, options_.trace_lane, -1, static_cast<int64_t>(b),
                   static_cast<int64_t>(buckets_[b].bytes()));
  }
}

bool GradientBuckets::any_nccl_in_flight() const {
  for (size_t b = 0; b < flights_.size(); ++b) {
    if (flights_[b].launched && !flights_[b].completed && nccl(buckets_[b].chunk) != nullptr) return true;
  }
  return false;
}

void GradientBuckets::poll() {
  // NCCL's buckets finish together: the groups say when all they were given is done.
  if (any_nccl_in_flight()) {
    const int64_t start = wall_ns();
    bool all_done = true;
    for (DeviceReducer* group : options_.nccl) all_done = all_done && (group == nullptr || group->done());
    const int64_t end = wall_ns();
    blocked_ns_ += end - start;
    for (size_t b = 0; b < flights_.size() && all_done; ++b) {
      if (flights_[b].launched && !flights_[b].completed && nccl(buckets_[b].chunk) != nullptr) complete(b, end);
    }
  }
  for (size_t b = 0; b < flights_.size(); ++b) {
    Flight& flight = flights_[b];
    if (!flight.launched || flight.completed || nccl(buckets_[b].chunk) != nullptr) continue;
    // MPI moves the reduction inside this call (a test can copy and add megabytes): time not hidden behind compute.
    const int64_t start = wall_ns();
    const bool done = flight.request.test();
    const int64_t end = wall_ns();
    blocked_ns_ += end - start;
    if (done) complete(b, end);
  }
}

void GradientBuckets::finish() {
  const int64_t finish_start = wall_ns();
  stats_ = GradientReductionStats{};
  stats_.buckets = static_cast<int>(buckets_.size());
  stats_.sharded = !options_.shards.empty();
  for (size_t chunk = 0; chunk < gradients_.size(); ++chunk) {
    const FlatParameters& range = gradients_[chunk];
    for (int s = range.last_segment(); s >= range.first_segment(); --s) {
      if (!ready_[chunk][static_cast<size_t>(s - range.first_segment())]) mark_ready(s, static_cast<int>(chunk));
    }
  }
  poll();
  int64_t last_completion = first_launch_ns_;
  int64_t exposed = 0;
  // Every bucket still in flight is tested in turn until all are done, not waited for one by one: a reduction made
  // of several rounds (vitpipe's ring) posts its next round only when tested, so waiting for one bucket would leave
  // the others' next rounds unposted and the link half idle. The deadline counts from the last bucket completed.
  const int64_t wait_start = wall_ns();
  bool waited = false;
  for (const Flight& flight : flights_) waited = waited || (flight.launched && !flight.completed);
  if (any_nccl_in_flight()) {
    BlockingCommunication blocked(
        concat("the NCCL gradient reduction among the ", group_->size(), " replicas of this stage"));
    for (DeviceReducer* group : options_.nccl) {
      if (group != nullptr) group->wait();
    }
    const int64_t now = wall_ns();
    for (size_t b = 0; b < flights_.size(); ++b) {
      if (flights_[b].launched && !flights_[b].completed && nccl(buckets_[b].chunk) != nullptr) complete(b, now);
    }
  }
  for (;;) {
    size_t pending = 0;
    for (const Flight& flight : flights_) pending += flight.launched && !flight.completed ? 1 : 0;
    if (pending == 0) break;
    BlockingCommunication blocked(
        concat("the gradient reduction's last ", pending, " bucket(s) of ", buckets_.size(),
               group_ ? concat(" among the ", group_->size(), " replicas of this stage") : std::string()));
    bool progressed = false;
    while (!progressed) {
      for (size_t b = 0; b < flights_.size(); ++b) {
        Flight& flight = flights_[b];
        if (!flight.launched || flight.completed || nccl(buckets_[b].chunk) != nullptr || !flight.request.test()) {
          continue;
        }
        complete(b, wall_ns());
        progressed = true;
      }
      if (!progressed) std::this_thread::yield();  // ranks as threads may share this core
    }
  }
  // Only a real wait is exposed, and it ends the window: the scan that finds everything already done is neither.
  if (waited) {
    const int64_t wait_end = wall_ns();
    exposed += wait_end - wait_start;
    last_completion = std::max(last_completion, wait_end);
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Flight& flight = flights_[b];
    last_completion = std::max(last_completion, flight.completion_ns);
    stats_.bytes += buckets_[b].bytes();
    const int me = group_ ? group_->rank() : 0;
    const GradientBucket& bucket = buckets_[b];
    const bool scaled = options_.scale != 1.0f && (bucket.owner < 0 || bucket.owner == me);
    Backend* device = options_.backends.empty() ? nullptr : options_.backends[static_cast<size_t>(bucket.chunk)];
    const Tensor on_device = gradients_[static_cast<size_t>(bucket.chunk)].flat().slice(bucket.begin, bucket.end);
    if (device != nullptr && !device->host_accessible() && !mirrored(bucket.chunk)) {
      if (scaled) device->scale(on_device, options_.scale, on_device);  // nothing was reduced: scale where it lies
      continue;
    }
    if (scaled) {
      float* data = host_data(bucket.chunk);
      for (int64_t i = bucket.begin; i < bucket.end; ++i) data[i] *= options_.scale;
    }
    if (mirrored(bucket.chunk)) {
      device->copy_from_host(
          Tensor::wrap(host_data(bucket.chunk) + bucket.begin, {bucket.end - bucket.begin}, DType::f32), on_device);
    }
  }
  const int64_t end = wall_ns();
  stats_.window_seconds = static_cast<double>(last_completion - first_launch_ns_) * 1e-9;
  stats_.exposed_seconds = static_cast<double>(exposed + blocked_ns_) * 1e-9;
  stats_.finish_seconds = static_cast<double>(end - finish_start) * 1e-9;
  if (trace_ && trace_->enabled() && exposed > 0) {
    const int64_t trace_now = trace_->now_ns();
    trace_->record("allreduce wait", kTraceAllReduce, trace_now - (end - finish_start), trace_now, options_.trace_lane);
  }
  // Ready for the next step.
  for (auto& ready : ready_) std::fill(ready.begin(), ready.end(), false);
  for (auto& flight : flights_) flight = Flight{};
  first_launch_ns_ = -1;
  blocked_ns_ = 0;
}

}  // namespace vitpipe
