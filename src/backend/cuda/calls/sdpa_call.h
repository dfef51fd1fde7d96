// cuDNN 9's fused scaled-dot-product attention (the SDPA_FWD / SDPA_BWD operations) as data: every tensor as cuDNN's
// backend tensor descriptor gives it, dimensions and strides in elements in the order [batch, head, sequence,
// feature] whatever the memory order; the scale; and the statistics saved for the backward pass, fp32 [b, h, s_q, 1]
// holding the natural-log log-sum-exp of each row's scaled scores (the Backend's lse). Built from the Backend's packed
// q|k|v tensor by attention_sdpa_calls.h, run by the module (sdpa_executor.cpp) and by the CPU interpreter
// (sdpa_interpreter.h) in the tests.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/calls/element_type.h"

namespace vitpipe::cuda {

struct StridedTensor4d {
  ElementType type = ElementType::bf16;
  std::array<int64_t, 4> dims{};     // [b, h, s, d]
  std::array<int64_t, 4> strides{};  // elements between neighbours along each dimension
  bool operator==(const StridedTensor4d&) const = default;
  int64_t offset(int64_t b, int64_t h, int64_t s, int64_t d) const {
    return b * strides[0] + h * strides[1] + s * strides[2] + d * strides[3];
  }
};

// Everything of a forward call but its pointers: the key of a cached execution plan.
struct SdpaForwardShape {
  int64_t batch = 0, heads = 0, s_q = 0, s_kv = 0, head_dim = 0;
  float attn_scale = 1.0f;  // scores = attn_scale * q . k
  StridedTensor4d q, k, v, o;
  StridedTensor4d stats;  // f32 [b, h, s_q, 1]: log sum_j exp(attn_scale * q_i . k_j)
  bool operator==(const SdpaForwardShape&) const = default;
};

struct SdpaForwardCall {
  const char* what = "";
  SdpaForwardShape shape;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* stats = nullptr;
};

struct SdpaBackwardShape {
  int64_t batch = 0, heads = 0, s_q = 0, s_kv = 0, head_dim = 0;
  float attn_scale = 1.0f;
  StridedTensor4d q, k, v, o, d_o, stats, d_q, d_k, d_v;
  bool deterministic = true;  // CUDNN_ATTR_ENGINE_... deterministic algorithm: two runs, the same bits
  bool operator==(const SdpaBackwardShape&) const = default;
};

// Overwrites dQ, dK and dV from Q, K, V, the forward's O and stats, and dO.
struct SdpaBackwardCall {
  const char* what = "";
  SdpaBackwardShape shape;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* d_o = nullptr;
  const float* stats = nullptr;
  void* d_q = nullptr;
  void* d_k = nullptr;
  void* d_v = nullptr;
};

// cudaMemsetAsync(data, 0, bytes): where a call writes less than the Backend overwrites.
struct MemsetCall {
  void* data = nullptr;
  size_t bytes = 0;
};

size_t sdpa_shape_hash(const SdpaForwardShape& shape);
size_t sdpa_shape_hash(const SdpaBackwardShape& shape);
std::string describe(const StridedTensor4d& t);

}  // namespace vitpipe::cuda
