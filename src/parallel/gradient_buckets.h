// Data-parallel gradient reduction that overlaps the backward pass (the PyTorch DDP idea): a stage's flat gradient
// range is cut into buckets of about 25 MB at parameter boundaries, numbered from the END of the range because the
// backward pass finishes the last block first. As the last micro-batch's backward completes each segment, the
// executor calls mark_ready(segment); every bucket whose segments are all final starts its non-blocking all-reduce
// at once, while the backward goes on. finish() waits for the rest and scales the sums.
//
// MPI progresses non-blocking collectives only inside MPI calls: call poll() between pieces of compute (e.g. after
// each segment's backward) so the reductions move while the CPU computes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/parameter_layout.h"
#include "parallel/communicator.h"
#include "parallel/device_reducer.h"
#include "parallel/optimizer_shards.h"

namespace vitpipe {

class TraceRecorder;

struct GradientBucketOptions {
  size_t bucket_bytes = size_t{25} << 20;  // PyTorch DDP's default bucket size
  // Applied to every gradient after the sum. E.g. 1/replicas when each replica's loss is already the mean over its
  // own samples, so that the step equals one process on the whole global batch.
  float scale = 1.0f;
  int trace_lane = 100;  // lane of the all-reduce events in the trace
  // Sharded optimizer (optimizer_shards.h): per gradient range (chunk), every replica's shard of it, by rank in the
  // data-parallel group. Buckets are then also cut at shard boundaries, and each is summed into its owner only (the
  // reduce-scatter, bucket by bucket); the other replicas' copies of it are left unreduced. Empty: all-reduce.
  std::vector<std::vector<ElementRange>> shards = {};
  // Per gradient range (chunk), the backend holding it, or empty: host memory. Where a backend's memory is not the
  // host's (a GPU), each bucket goes device -> host mirror before its reduction and back after it (MPI only ever
  // sees host memory), and a step without a reduction scales on the device.
  std::vector<Backend*> backends = {};
  // Per gradient range (chunk), an NCCL group (a DeviceReducer) over the same replicas as `group` on that chunk's
  // backend, or empty:
  // then each bucket is reduced on the GPUs (ncclAllReduce, or ncclReduce to its owner when sharded) on the
  // communicator's stream, after the backward kernels already enqueued, with no host copy; its completion is known for
  // all buckets in flight together (NcclGroup::done / wait). No mirrors are taken for such a chunk.
  std::vector<DeviceReducer*> nccl = {};
};

struct GradientBucket {
  int chunk = 0;      // which of the gradient ranges (model chunks) it lies in
  int64_t begin = 0;  // element offsets within that range's flat buffer, [begin, end)
  int64_t end = 0;
  int first_segment = 0;  // segments it touches, inclusive
  int last_segment = 0;
  int owner = -1;  // sharded: the data-parallel rank whose shard holds it; -1: all-reduced
  size_t bytes() const { return static_cast<size_t>(end - begin) * sizeof(float); }
};

struct GradientReductionStats {
  int buckets = 0;
  size_t bytes = 0;  // gradient bytes reduced (all-reduced or reduce-scattered), this rank's buffer
  bool sharded = false;
  double window_seconds = 0;  // first all-reduce launched -> last one seen complete (or the wait for it ended)
  // The part of that window this rank spent inside the reduction's MPI calls: launching and testing buckets during
  // the backward pass (MPI progresses a reduction only inside its calls, so that work is not hidden) and waiting
  // in finish().
  double exposed_seconds = 0;
  double finish_seconds = 0;  // all of finish(), scaling included
  // "All-reduce time hidden behind backward": 1 - exposed / window (1 when there was nothing to wait for).
  double hidden_fraction() const {
    return window_seconds > 0 ? std::clamp(1.0 - exposed_seconds / window_seconds, 0.0, 1.0) : 1.0;
  }
};

// Cuts the parameters of `ranges` (one FlatParameters per model chunk this rank holds) into buckets, from the end;
// with `shards` (GradientBucketOptions::shards) also at shard boundaries, each bucket tagged with its owner.
std::vector<GradientBucket> make_gradient_buckets(const std::vector<FlatParameters>& ranges, size_t bucket_bytes,
                                                  const std::vector<std::vector<ElementRange>>& shards = {});

class GradientBuckets {
 public:
  // `gradients`: the gradient buffers of this rank's chunks (they must outlive this object). `group`: the
  // data-parallel group (may be null or of size 1: then only the scaling happens). `trace` may be null.
  GradientBuckets(std::vector<FlatParameters> gradients, Communicator* group, GradientBucketOptions options = {},
                  TraceRecorder* trace = nullptr);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  bool launched(size_t bucket) const;  // its all-reduce has started this step

  // The gradients of `segment` in chunk `chunk` are final for this step: launches every bucket now complete.
  void mark_ready(int segment, int chunk = 0);
  // Tests the in-flight reductions (drives MPI's progress); cheap.
  void poll();
  // Marks whatever is left ready, waits for every bucket, scales (sharded: the buckets this rank owns), and resets
  // for the next step.
  void finish();
  // The numbers of the last finish().
  const GradientReductionStats& stats() const { return stats_; }

 private:
  struct Flight;
  void launch(size_t bucket);
  void complete(size_t bucket, int64_t now_ns);

  bool mirrored(int chunk) const { return !host_[static_cast<size_t>(chunk)].empty(); }
  DeviceReducer* nccl(int chunk) const {
    return options_.nccl.empty() ? nullptr : options_.nccl[static_cast<size_t>(chunk)];
  }
  bool any_nccl_in_flight() const;
  float* host_data(int chunk);  // the chunk's gradients as the host reduces them: the mirror, or the buffer itself

  std::vector<FlatParameters> gradients_;
  std::vector<std::vector<float>> host_;  // per chunk: the host mirror of device gradients (empty: none needed)
  Communicator* group_;
  GradientBucketOptions options_;
  TraceRecorder* trace_;
  std::vector<GradientBucket> buckets_;
  std::vector<std::vector<bool>> ready_;  // [chunk][segment - first_segment]
  std::vector<Flight> flights_;           // per bucket
  GradientReductionStats stats_;
  int64_t first_launch_ns_ = -1;
  int64_t blocked_ns_ = 0;  // this step's time in launches and tests of in-flight buckets
};

}  // namespace vitpipe
