// What the tests of the libraries' calls as data share: random tensors, their views as the call builders see them,
// and the relative difference the CPU kernels' tests measure.
#pragma once

#include <algorithm>
#include <cmath>

#include "backend/cuda/calls/linear_gemm_calls.h"
#include "backend/cuda/calls/row_major_matrix.h"
#include "tensor/tensor.h"
#include "util/random.h"

namespace vitpipe::call_tests {

inline Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double scale = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Rng rng(seed);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(scale * rng.normal());
  return dtype == DType::f32 ? t : t.to(dtype);
}

inline cuda::ElementType element_type(DType dtype) {
  return dtype == DType::bf16 ? cuda::ElementType::bf16 : cuda::ElementType::f32;
}

// The tensor as a row-major [numel / last dim, last dim] matrix.
inline cuda::RowMajorMatrix matrix(const Tensor& t) {
  const int64_t cols = t.dim(-1);
  return {t.raw(), t.numel() / cols, cols, element_type(t.dtype())};
}

inline cuda::BiasVector bias_vector(const Tensor& t) { return {t.raw(), element_type(t.dtype())}; }

// max |actual - expected| / max(1e-3, max |expected|), both read as f32.
inline double relative_difference(const Tensor& actual, const Tensor& expected) {
  const Tensor a = actual.to(DType::f32), e = expected.to(DType::f32);
  double diff = 0.0, scale = 1e-3;
  for (int64_t i = 0; i < e.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(a.f32()[i] - e.f32()[i])));
    scale = std::max(scale, static_cast<double>(std::abs(e.f32()[i])));
  }
  return diff / scale;
}

constexpr double kF32Tolerance = 1e-5;
constexpr double kBf16Tolerance = 3e-2;
inline double tolerance(DType dtype) { return dtype == DType::f32 ? kF32Tolerance : kBf16Tolerance; }

}  // namespace vitpipe::call_tests
