// GELU's forward and backward over a run of elements on the calling thread, shared by the GELU passes (gelu.cpp)
// and the fused fc1 pass (linear_gelu.cpp), which runs them on each block of rows its GEMM has just written. A bf16
// input has only 65,536 values, so there GELU and its derivative are looked up in tables of the same functions'
// results (built once, 256 KiB each: they stay in L2), which spares the erf and exp that bound these passes.
// Included after level_target.h: compiled for the including file's CPU level.
#pragma once

#ifndef VITPIPE_LEVEL_AVX512
#error "gelu_rows.h goes after level_target.h (its loops must be compiled for the level)"
#endif

#include <cstdint>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels/vector_math.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {

// f(x) for every bf16 bit pattern x.
template <float (*f)(float)>
const float* bf16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t bits = 0; bits < 65536; ++bits) t[bits] = f(bf16_to_float(static_cast<uint16_t>(bits)));
    return t;
  }();
  return table.data();
}

// The activation's value and derivative at x: computed (f32), or looked up (bf16 bits).
inline float gelu_of(float x, const float*) { return gelu(x); }
inline float gelu_of(uint16_t x, const float* table) { return table[x]; }
inline float derivative_of(float x, const float*) { return gelu_derivative(x); }
inline float derivative_of(uint16_t x, const float* table) { return table[x]; }

template <class In>
const float* gelu_table_for() {
  if constexpr (std::is_same_v<In, uint16_t>) return bf16_table<gelu>();
  return nullptr;
}
template <class In>
const float* gelu_derivative_table_for() {
  if constexpr (std::is_same_v<In, uint16_t>) return bf16_table<gelu_derivative>();
  return nullptr;
}

// out[i] = GELU(in[i]) for n elements; `table` from gelu_table_for<In>().
template <class In, class Out>
inline void gelu_run(const In* in, Out* out, int64_t n, const float* table) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) store(out + i, gelu_of(in[i], table));
}

// grad_in = grad_out * GELU'(in) over one row of `cols`, adding grad_in to `column_sums` when given; `table` from
// gelu_derivative_table_for<In>().
template <class GradOut, class In, class GradIn>
inline void gelu_backward_row(const GradOut* grad_out, const In* in, GradIn* grad_in, int64_t cols, const float* table,
                              float* column_sums) {
  if (column_sums) {
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) {
      const float g = load(grad_out + j) * derivative_of(in[j], table);
      store(grad_in + j, g);
      column_sums[j] += g;
    }
  } else {
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) store(grad_in + j, load(grad_out + j) * derivative_of(in[j], table));
  }
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
