// Turns the SDPA descriptions (calls/sdpa_call.h) into cuDNN 9 backend-API calls: the native SDPA_FWD / SDPA_BWD
// operation descriptors (cuDNN 9.13 and later; the headers are probed at compile time), one operation graph each,
// and, where the native SDPA_BWD is refused, the composite backward graph cudnn-frontend builds (17 or 18 pointwise,
// reduction, reshape and matmul operations; its deterministic dP-workspace variant when determinism is asked),
// heuristic mode A's engine configurations tried in order (for the backward pass skipping those cuDNN marks
// non-deterministic) until an execution plan finalises within kMaxWorkspaceBytes of workspace, cached per shape; the
// backend grows its workspace to what the plan asks. Compiled into the CUDA module only. NOT YET RUN ON A GPU: whether
// cuDNN accepts these graphs (and has an engine for the classifier token's single query row) is unknown until one runs;
// the CPU suite proves the descriptions (tests/cuda/test_sdpa_calls.cpp), not this translation.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "backend/cuda/calls/sdpa_call.h"

namespace vitpipe::cuda {

class SdpaExecutor {
 public:
  // Device memory of at least the given bytes for the next execution (the backend grows its block as plans need).
  using WorkspaceSource = std::function<void*(size_t bytes)>;
  // Engines asking for more workspace than this are passed over.
  static constexpr size_t kMaxWorkspaceBytes = size_t{1} << 30;

  // The handle outlives the executor.
  SdpaExecutor(cudnnHandle_t handle, WorkspaceSource workspace);
  ~SdpaExecutor();
  SdpaExecutor(const SdpaExecutor&) = delete;
  SdpaExecutor& operator=(const SdpaExecutor&) = delete;

  // Check the call's rules (calls/sdpa_rules.h), then enqueue it on `stream`. Throw std::runtime_error naming the
  // call and cuDNN's status, or saying that no engine runs it (the caller's cue to fall back).
  void run(const SdpaForwardCall& call, cudaStream_t stream);
  void run(const SdpaBackwardCall& call, cudaStream_t stream);
  // Which graph ran the backward pass at `shape` (the native SDPA_BWD, or cudnn-frontend's composite graph and why
  // the native one was refused); empty before it ran.
  std::string backward_path(const SdpaBackwardShape& shape) const;

  struct Plan;

 private:
  template <class Shape>
  struct ShapeHash {
    size_t operator()(const Shape& s) const { return sdpa_shape_hash(s); }
  };

  cudnnHandle_t handle_;
  WorkspaceSource workspace_;
  std::unordered_map<SdpaForwardShape, std::unique_ptr<Plan>, ShapeHash<SdpaForwardShape>> forward_plans_;
  std::unordered_map<SdpaBackwardShape, std::unique_ptr<Plan>, ShapeHash<SdpaBackwardShape>> backward_plans_;
};

}  // namespace vitpipe::cuda
