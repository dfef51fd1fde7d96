// The exact (erf) GELU and its derivative, per element, as the CUDA kernels compute them. The same functions run on
// the CPU in the test suite (tests/cuda/test_gelu_math.cpp) against the float64 reference the CPU kernels meet, so
// the arithmetic is proven without a GPU; only the launch is left to the GPU check.
#pragma once

#include <math.h>

#include "backend/cuda/kernels/host_device.h"

namespace vitpipe::cuda {

// 1 / sqrt(2) and 1 / sqrt(2 pi), rounded to float.
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)): ViT's GELU, not the tanh approximation (up to 4.7e-4 away).
VITPIPE_HOST_DEVICE float gelu(float x) { return 0.5f * x * (1.0f + erff(x * kInvSqrt2)); }

// d gelu / dx = Phi(x) + x phi(x).
VITPIPE_HOST_DEVICE float gelu_derivative(float x) {
  const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
  return cdf + x * kInvSqrt2Pi * expf(-0.5f * x * x);
}

}  // namespace vitpipe::cuda
