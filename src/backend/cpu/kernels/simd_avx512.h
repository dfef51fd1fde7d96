// AVX-512 versions of the pieces GCC does not vectorise well by itself: exp through vscalefps, masked row tails and
// bf16 stores (vcvtneps2bf16 at the avx512_bf16 level), for softmax and LayerNorm. Same formulas as vector_math.h (so
// the same accuracy); built only into the AVX-512 levels' kernels (level_target.h includes it after its target
// pragma), the portable loops serve the avx2 level.
// (GELU's erf was tried here too and ran slower than GCC's own vectorisation of vector_math.h, so it stays there.)
#pragma once

#include "backend/cpu/kernels/exp2_polynomial.h"

#if VITPIPE_LEVEL_AVX512
#define VITPIPE_AVX512 1

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS::simd {

// Horizontal sums/maxima by halving. The halves come from zero-masked extracts: GCC 12's _mm512_reduce_*,
// _mm512_castps512_ps256 and unmasked shuffles start from an undefined register that it then reports as
// uninitialised where they are inlined into a plain function (GCC PR 105593).
inline __m256 low_half(__m512 v) { return _mm512_maskz_extractf32x8_ps(0xff, v, 0); }
inline __m256 high_half(__m512 v) { return _mm512_maskz_extractf32x8_ps(0xff, v, 1); }
inline float reduce_add(__m512 v) {
  __m256 h = _mm256_add_ps(low_half(v), high_half(v));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}
inline float reduce_max(__m512 v) {
  __m256 h = _mm256_max_ps(low_half(v), high_half(v));
  __m128 q = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_max_ps(q, _mm_movehl_ps(q, q));
  q = _mm_max_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

inline __mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << remaining) - 1u);
}

// exp(x) = 2^n * p(r): n = round(x / ln2) applied by vscalefps (no integer exponent arithmetic).
inline __m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.0f)), _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// 2^t, for callers that fold log2(e) into a multiply-add they do anyway (attention's softmax): half exp_ps's
// operations. t = n + f with n = round(t) applied by vscalefps and 2^f, f in [-1/2, 1/2], a degree-5 polynomial
// fitted for relative error (1.8e-7 in float arithmetic, about exp_ps's). No clamps: vscalefps gives 0 below 2^-149
// and inf above 2^127.
inline __m512 exp2_ps(__m512 t) {
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(kExp2Poly[5]);
  for (int c = 4; c >= 0; --c) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2Poly[c]));
  return _mm512_scalef_ps(p, n);
}

// Masked loads and stores of f32 or bf16 (uint16_t bits) as 16 floats.
inline __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load(const uint16_t* p, __mmask16 m) {
  const __m256i bits = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}
inline void store(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
// 16 floats rounded to bf16 bits, to nearest even.
inline __m256i bf16_bits(__m512 v) {
#if VITPIPE_LEVEL_AVX512_BF16
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));  // in hardware
#else
  // By hand (NaN inputs do not occur in these kernels' outputs).
  __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  u = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16));
#endif
}
inline void store(uint16_t* p, __m512 v, __mmask16 m) { _mm256_mask_storeu_epi16(p, m, bf16_bits(v)); }

// Two rows of 16 bf16 as the 32 of one VNNI pair row: even[0], odd[0], even[1], odd[1], ...
inline __m512i interleave_pairs(__m256i even, __m256i odd) {
  alignas(64) static constexpr uint16_t kOrder[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(even), odd, 1);
  return _mm512_permutexvar_epi16(_mm512_load_si512(kOrder), both);
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS::simd
#endif
