// The softmax rows' exponentials at the avx2 level, for f32 probabilities: 2^t as simd_avx512.h's exp2_ps, on 8
// lanes. GCC's vectorisation of the portable exp_approx turns its clamps into compares and blends and takes about
// twice the operations. Included after level_target.h: compiled for the including file's CPU level.
#pragma once

#ifndef VITPIPE_LEVEL_AVX512
#error "exp2_rows_avx2.h goes after level_target.h (its loops must be compiled for the level)"
#endif

#include <cstdint>

#include "backend/cpu/kernels/exp2_polynomial.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS::avx2 {

// 2^t for t < 128, the same degree-5 polynomial as exp2_ps. 2^n is built in the exponent field, so t is first
// raised to -126 (no denormals there): below, it returns about 1e-38 instead of 0, which no softmax sum notices.
inline __m256 exp2_ps(__m256 t) {
  t = _mm256_max_ps(t, _mm256_set1_ps(-126.0f));
  const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(t, n);
  __m256 p = _mm256_set1_ps(kExp2Poly[5]);
  for (int c = 4; c >= 0; --c) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2Poly[c]));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}

// out[j] = 2^(row[j] * a - b) for j < cols; returns their sum.
inline float exp2_row(const float* row, float* out, int64_t cols, float a, float b) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  __m256 sum = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= cols; j += 8) {
    const __m256 e = exp2_ps(_mm256_fmsub_ps(_mm256_loadu_ps(row + j), va, vb));
    _mm256_storeu_ps(out + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (j < cols) {
    const __m256i lanes =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(cols - j)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 e =
        _mm256_and_ps(exp2_ps(_mm256_fmsub_ps(_mm256_maskload_ps(row + j, lanes), va, vb)), _mm256_castsi256_ps(lanes));
    _mm256_maskstore_ps(out + j, lanes, e);
    sum = _mm256_add_ps(sum, e);
  }
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS::avx2
