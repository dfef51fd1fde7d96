// Branch-free scalar math that GCC vectorises inside `#pragma omp simd` loops (libm's expf/erff do not).
// Accuracy: exp within ~2 ulp on [-87, 88]; erf within ~4e-7 absolute (checked against std::erf in the tests).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "tensor/dtype.h"

namespace vitpipe::cpu {

// Clamps are min/max, which every vector ISA has (a nested select would become compares and blends on AVX2).
inline float exp_approx(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  // exp(x) = 2^n * exp(r), r = x - n ln2 in [-ln2/2, ln2/2]; n rounded with the 1.5 * 2^23 trick.
  const float shifter = 12582912.0f;
  float n = x * 1.44269504088896341f + shifter;
  n -= shifter;
  float r = x - n * 0.693359375f;
  r -= n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t exponent = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(exponent);
}

// erf as a rational function of x^2 on [-4, 4] (beyond that erf is +-1 in float).
inline float erf_approx(float x) {
  x = std::min(std::max(x, -4.0f), 4.0f);
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return x * p / q;
}

inline float gelu(float x) { return 0.5f * x * (1.0f + erf_approx(x * 0.70710678118654752f)); }

// d gelu / dx = Phi(x) + x * phi(x)
inline float gelu_derivative(float x) {
  float cdf = 0.5f * (1.0f + erf_approx(x * 0.70710678118654752f));
  float pdf = 0.3989422804014327f * exp_approx(-0.5f * x * x);
  return cdf + x * pdf;
}

// Element access for kernels templated on storage type: float, or uint16_t holding bf16 bits.
inline float load(const float* p) { return *p; }
inline float load(const uint16_t* p) { return bf16_to_float(*p); }
inline void store(float* p, float v) { *p = v; }
inline void store(uint16_t* p, float v) { *p = float_to_bf16(v); }

}  // namespace vitpipe::cpu
