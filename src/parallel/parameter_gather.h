// The all-gather half of a sharded optimizer step (optimizer_shards.h): once every replica has updated its shard
// of a stage's parameters, each bucket (the gradient buckets' geometry: one owner each) is broadcast from its owner,
// non-blocking, first segments first. The next step's first forward waits for a segment's buckets just before it
// computes that segment, so the gather of later segments overlaps the forward of earlier ones.
//
// MPI progresses the broadcasts only inside its calls: wait_segment() also tests the ones still in flight. Chunks on a
// GPU broadcast with NCCL (device_reducer.h) instead, on the device memory itself: their first wait_segment() waits
// for the whole chunk's gather (NCCL reports completion per communicator, not per call).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/parameter_layout.h"
#include "parallel/communicator.h"
#include "parallel/device_reducer.h"
#include "parallel/gradient_buckets.h"

namespace vitpipe {

class TraceRecorder;

struct ParameterGatherStats {
  size_t bytes = 0;            // parameter bytes gathered (this rank's buffer) in the last gather
  double window_seconds = 0;   // first broadcast launched -> last one seen complete
  double exposed_seconds = 0;  // time this rank spent inside the broadcasts' calls (launch, test, wait)
  double hidden_fraction() const {
    return window_seconds > 0 ? std::clamp(1.0 - exposed_seconds / window_seconds, 0.0, 1.0) : 1.0;
  }
};

class ParameterGather {
 public:
  // `parameters`: the value buffers of this rank's chunks (they must outlive this object); `buckets`: owners set
  // (make_gradient_buckets with shards); `group`: the data-parallel group.
  // `device_collectives`: empty, or one per chunk (nullptr: that chunk's parameters are host memory, broadcast by
  // `group` over MPI).
  ParameterGather(std::vector<FlatParameters> parameters, std::vector<GradientBucket> buckets, Communicator* group,
                  TraceRecorder* trace = nullptr, int trace_lane = 100,
                  std::vector<DeviceReducer*> device_collectives = {});
  ~ParameterGather();
  ParameterGather(const ParameterGather&) = delete;
  ParameterGather& operator=(const ParameterGather&) = delete;

  // Launches every bucket's broadcast (after the optimizer updated this rank's shard).
  void start();
  // Waits for the buckets of `chunk` that touch `segment`. True when the segment's values changed since the last
  // start() and this is the first call to see them complete (the caller then refreshes copies such as bf16).
  bool wait_segment(int chunk, int segment);
  bool in_flight() const { return in_flight_; }
  // The numbers of the last gather, complete once every segment was waited for.
  const ParameterGatherStats& stats() const { return stats_; }

 private:
  struct Flight;
  DeviceReducer* device_collectives(int chunk) const;
  void complete_chunk_on_device(int chunk, int64_t now_ns);
  void poll();
  void complete(size_t bucket, int64_t now_ns);

  std::vector<FlatParameters> parameters_;
  std::vector<GradientBucket> buckets_;  // launch order: chunk, then offset
  std::vector<DeviceReducer*> device_collectives_;
  Communicator* group_;
  TraceRecorder* trace_;
  int trace_lane_;
  std::vector<Flight> flights_;
  std::vector<std::vector<bool>> delivered_;  // [chunk][segment - first]: reported by wait_segment this gather
  bool in_flight_ = false;
  int64_t first_launch_ns_ = 0;
  int64_t blocked_ns_ = 0;
  ParameterGatherStats stats_;
};

}  // namespace vitpipe
