// Turns GemmCall descriptions (calls/gemm_call.h) into cublasLtMatmul calls: matmul descriptor, matrix layouts,
// preference with the stream's workspace, up to kHeuristicAlgorithms of the heuristic's algorithms (the next tried
// where cuBLASLt refuses one at run time), cached per GemmShape so that a step builds nothing after its first
// micro-batch. Compiled into the CUDA module only. NOT YET RUN ON A GPU: the CPU
// suite proves the descriptions (tests/cuda/test_gemm_calls.cpp), not this translation.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <unordered_map>

#include "backend/cuda/calls/gemm_call.h"

namespace vitpipe::cuda {

class GemmExecutor {
 public:
  static constexpr int kHeuristicAlgorithms = 8;

  // `workspace` is device memory of `workspace_bytes` taken once by the backend (32 MiB on Hopper, one per stream);
  // the handle outlives the executor.
  GemmExecutor(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes);
  ~GemmExecutor();
  GemmExecutor(const GemmExecutor&) = delete;
  GemmExecutor& operator=(const GemmExecutor&) = delete;

  // Checks the call's rules (calls/gemm_rules.h), then enqueues it on `stream`. Throws std::runtime_error naming
  // the call and cuBLASLt's status.
  void run(const GemmCall& call, cudaStream_t stream);

  size_t cached_plans() const { return plans_.size(); }
  // Algorithms cuBLASLt refused at run time (each dropped from its shape's plan).
  int refused_algorithms() const { return refused_algorithms_; }

 private:
  struct Plan;
  struct ShapeHash {
    size_t operator()(const GemmShape& s) const { return gemm_shape_hash(s); }
  };
  Plan& plan_for(const GemmCall& call);

  cublasLtHandle_t handle_;
  void* workspace_;
  size_t workspace_bytes_;
  int refused_algorithms_ = 0;
  std::unordered_map<GemmShape, std::unique_ptr<Plan>, ShapeHash> plans_;
};

}  // namespace vitpipe::cuda
