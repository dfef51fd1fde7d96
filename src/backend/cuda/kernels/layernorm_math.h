// LayerNorm's arithmetic as the CUDA kernels compute it (kernels/layernorm.cu, one warp per row): the per-element
// steps shared by host and device, and the per-row forward and input gradient on the host with the warp's summation
// order (warp_sum.h), which the CPU test suite holds to the float64 reference the CPU kernels meet
// (tests/cuda/test_layernorm_math.cpp). The weight and bias gradients (column sums over rows) are not here yet.
#pragma once

#include <math.h>

#include <cstdint>

#include "backend/cuda/kernels/host_device.h"
#include "backend/cuda/kernels/warp_sum.h"

namespace vitpipe::cuda {

// 1 / sqrt(variance + eps), correctly rounded on both sides (rsqrtf's 2 ulp would differ from the host).
VITPIPE_HOST_DEVICE float layernorm_rstd(float variance, float eps) { return 1.0f / sqrtf(variance + eps); }

VITPIPE_HOST_DEVICE float centered_square(float x, float mean) {
  const float c = x - mean;
  return c * c;
}

// out = (x - mean) * rstd * weight + bias.
VITPIPE_HOST_DEVICE float layernorm_output(float x, float mean, float rstd, float weight, float bias) {
  return (x - mean) * rstd * weight + bias;
}

// d(in) = rstd * (g * w - mean(g * w) - xhat * mean(g * w * xhat)), with xhat = (x - mean) * rstd.
VITPIPE_HOST_DEVICE float layernorm_input_gradient(float grad_out, float weight, float xhat, float rstd, float mean_gw,
                                                   float mean_gw_xhat) {
  return rstd * (grad_out * weight - mean_gw - xhat * mean_gw_xhat);
}

#ifndef __CUDACC__
// The kernels' rows, modelled on the host for the tests (warp_sum_emulated is host only).
struct RowStatistics {
  float mean, rstd;
};

// One row's forward pass on the host, summed in the warp's order: two passes (mean, then the centred squares).
inline RowStatistics layernorm_forward_row(const float* x, const float* weight, const float* bias, int64_t d, float eps,
                                           float* out) {
  const float mean = warp_sum_emulated([x](int64_t j) { return x[j]; }, d) / static_cast<float>(d);
  const float variance =
      warp_sum_emulated([x, mean](int64_t j) { return centered_square(x[j], mean); }, d) / static_cast<float>(d);
  const float rstd = layernorm_rstd(variance, eps);
  for (int64_t j = 0; j < d; ++j) out[j] = layernorm_output(x[j], mean, rstd, weight[j], bias[j]);
  return {mean, rstd};
}

// One row's input gradient on the host, summed in the warp's order.
inline void layernorm_backward_row(const float* grad_out, const float* x, const float* weight, RowStatistics s,
                                   int64_t d, float* grad_in) {
  const auto xhat = [x, s](int64_t j) { return (x[j] - s.mean) * s.rstd; };
  const float mean_gw =
      warp_sum_emulated([&](int64_t j) { return grad_out[j] * weight[j]; }, d) / static_cast<float>(d);
  const float mean_gw_xhat =
      warp_sum_emulated([&](int64_t j) { return grad_out[j] * weight[j] * xhat(j); }, d) / static_cast<float>(d);
  for (int64_t j = 0; j < d; ++j) {
    grad_in[j] = layernorm_input_gradient(grad_out[j], weight[j], xhat(j), s.rstd, mean_gw, mean_gw_xhat);
  }
}

#endif

}  // namespace vitpipe::cuda
