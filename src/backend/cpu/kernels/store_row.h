// A row of f32 results written into f32 or bf16 storage (bf16 rounded to nearest even), shared by the kernels that
// copy a finished row out of their scratch (attention's head gradients, LayerNorm's backward copy).
// Included after level_target.h: compiled for the including file's CPU level.
#pragma once

#ifndef VITPIPE_LEVEL_AVX512
#error "store_row.h goes after level_target.h (its loop must be compiled for the level)"
#endif

#include <cstdint>

#include "backend/cpu/kernels/vector_math.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {

template <class T>
inline void store_row(const float* src, T* dst, int64_t n) {
#ifdef VITPIPE_AVX512
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = simd::tail_mask(n - j);
    simd::store(dst + j, simd::load(src + j, m), m);
  }
#else
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) store(dst + j, src[j]);
#endif
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
