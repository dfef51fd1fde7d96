// The CUDA LayerNorm kernels' arithmetic (backend/cuda/kernels/layernorm_math.h), with the warp's summation order
// modelled on the host, against the float64 reference and tolerances the CPU kernels meet
// (tests/backend/test_kernels_by_level.cpp: 1e-5 relative for f32).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../backend/float64_reference.h"
#include "backend/cuda/kernels/layernorm_math.h"
#include "backend/cuda/kernels/warp_sum.h"
#include "util/random.h"

using namespace vitpipe;

namespace {

constexpr double kF32Tolerance = 1e-5;

std::vector<float> random_floats(size_t count, uint64_t seed, double scale, double offset = 0.0) {
  Rng rng(seed);
  std::vector<float> v(count);
  for (float& x : v) x = static_cast<float>(offset + scale * rng.normal());
  return v;
}

std::vector<double> widened(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// max |a - b| / max(1e-3, max |b|), as the CPU kernels' tests measure.
double relative_difference(const std::vector<float>& actual, const std::vector<double>& expected) {
  double diff = 0.0, scale = 1e-3;
  for (size_t i = 0; i < actual.size(); ++i) {
    diff = std::max(diff, std::abs(actual[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return diff / scale;
}

}  // namespace

TEST(CudaKernelMath, WarpSumAddsInTheButterflyOrder) {
  // 1 + 2 + ... + 100 is exact in float, whatever the order.
  EXPECT_EQ(cuda::warp_sum_emulated([](int64_t j) { return static_cast<float>(j + 1); }, 100), 5050.0f);
  // A row shorter than the warp: the idle lanes add zeros.
  EXPECT_EQ(cuda::warp_sum_emulated([](int64_t) { return 1.0f; }, 5), 5.0f);
  // The order is the butterfly's, not left to right: 1e8 + 1 + ... loses the ones one way and not the other.
  const auto value = [](int64_t j) { return j == 0 ? 1e8f : 1.0f; };
  float left_to_right = 0.0f;
  for (int64_t j = 0; j < 64; ++j) left_to_right += value(j);
  EXPECT_EQ(left_to_right, 1e8f);
  EXPECT_NE(cuda::warp_sum_emulated(value, 64), left_to_right);
}

TEST(CudaKernelMath, LayerNormMatchesTheFloat64Reference) {
  // 197 (ViT's tokens: no multiple of the warp), 768 (ViT-B's width) and 20 (shorter than a warp); rows with a
  // large mean, where a one-pass variance would cancel.
  for (const int64_t d : {int64_t{197}, int64_t{768}, int64_t{20}}) {
    const int64_t rows = 7;
    const float eps = 1e-6f;
    const std::vector<float> x = random_floats(static_cast<size_t>(rows * d), 31, 2.0, 50.0);
    const std::vector<float> w = random_floats(static_cast<size_t>(d), 32, 1.0);
    const std::vector<float> b = random_floats(static_cast<size_t>(d), 33, 1.0);
    const std::vector<float> g = random_floats(static_cast<size_t>(rows * d), 34, 1.0);
    std::vector<float> out(x.size()), grad_in(x.size()), mean(static_cast<size_t>(rows)), rstd(mean.size());
    for (int64_t i = 0; i < rows; ++i) {
      const cuda::RowStatistics s = cuda::layernorm_forward_row(&x[i * d], w.data(), b.data(), d, eps, &out[i * d]);
      mean[i] = s.mean, rstd[i] = s.rstd;
      cuda::layernorm_backward_row(&g[i * d], &x[i * d], w.data(), s, d, &grad_in[i * d]);
    }
    const reference::LayerNormForward f =
        reference::layernorm_forward(widened(x), widened(w), widened(b), rows, d, eps);
    EXPECT_LT(relative_difference(out, f.out), kF32Tolerance) << d;
    EXPECT_LT(relative_difference(mean, f.mean), kF32Tolerance) << d;
    EXPECT_LT(relative_difference(rstd, f.rstd), kF32Tolerance) << d;
    const std::vector<double> expected_in = reference::layernorm_input_gradient(widened(g), widened(w), f, rows, d);
    EXPECT_LT(relative_difference(grad_in, expected_in), kF32Tolerance) << d;
  }
}
