// The CUDA GELU kernels' arithmetic (backend/cuda/kernels/gelu_math.h, __host__ __device__), run here on the CPU
// against the float64 reference and the f32 tolerance the CPU kernels meet (tests/backend/test_kernels_by_level.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../backend/float64_reference.h"
#include "backend/cuda/kernels/gelu_math.h"
#include "util/random.h"

using namespace vitpipe;

namespace {

// The CPU kernels' f32 bound: max |a - b| / max(1e-3, max |b|) below 2e-6.
constexpr double kF32Tolerance = 2e-6;

template <class Actual, class Expected>
double relative_difference(Actual actual, Expected expected) {
  Rng rng(21);
  double diff = 0.0, scale = 1e-3;
  for (int i = 0; i < 200000; ++i) {
    // Standard normal times 3, as the CPU test, plus the tails where erf saturates.
    const float x = static_cast<float>(i < 1000 ? -10.0 + 0.02 * i : 3.0 * rng.normal());
    diff = std::max(diff, std::abs(static_cast<double>(actual(x)) - expected(static_cast<double>(x))));
    scale = std::max(scale, std::abs(expected(static_cast<double>(x))));
  }
  return diff / scale;
}

}  // namespace

TEST(CudaKernelMath, GeluMatchesTheFloat64Reference) {
  EXPECT_LT(relative_difference(cuda::gelu, reference::gelu), kF32Tolerance);
}

TEST(CudaKernelMath, GeluDerivativeMatchesTheFloat64Reference) {
  EXPECT_LT(relative_difference(cuda::gelu_derivative, reference::gelu_derivative), kF32Tolerance);
}

TEST(CudaKernelMath, GeluIsTheErfFormNotTheTanhApproximation) {
  // At x = -2.5 the two forms differ by about 4e-4, far beyond the tolerance: the test would catch a swap.
  const double tanh_form = 0.5 * -2.5 * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (-2.5 + 0.044715 * -15.625)));
  EXPECT_GT(std::abs(tanh_form - reference::gelu(-2.5)), 1e-4);
  EXPECT_NEAR(cuda::gelu(-2.5f), reference::gelu(-2.5), 1e-7);
}
