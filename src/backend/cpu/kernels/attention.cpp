// Scaled dot-product attention, one (batch, head) pair per task. Each task keeps its [T, T] score block in a
// thread-private scratch (L2-resident for ViT sizes), so scores never travel to memory; only the probabilities are
// written, because the backward pass needs them. The four small GEMMs per task run on oneDNN primitives prepared
// once and executed on the calling thread.
#include <cmath>

#include "backend/cpu/kernels/attention_dims.h"
#include "backend/cpu/kernels/cpu_backend.h"
#include "backend/cpu/kernels/vector_math.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {
namespace {

// Row-wise softmax of scale * s in place, then stored to p (f32 or bf16).
template <class P>
void softmax_rows(float* s, P* p, int64_t rows, int64_t cols, float scale) {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = s + i * cols;
    P* out = p + i * cols;
#ifdef VITPIPE_AVX512
    using namespace simd;
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < cols; j += 16) {
      vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail_mask(cols - j), row + j));
    }
    const __m512 max = _mm512_set1_ps(reduce_max(vmax));
    const __m512 vscale = _mm512_set1_ps(scale);
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 m = tail_mask(cols - j);
      const __m512 e = _mm512_maskz_mov_ps(m, exp_ps(_mm512_mul_ps(_mm512_sub_ps(load(row + j, m), max), vscale)));
      _mm512_mask_storeu_ps(row + j, m, e);
      vsum = _mm512_add_ps(vsum, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / reduce_add(vsum));
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 m = tail_mask(cols - j);
      store(out + j, _mm512_mul_ps(load(row + j, m), inv), m);
    }
#else
    float max = row[0];
#pragma omp simd reduction(max : max)
    for (int64_t j = 0; j < cols; ++j) max = row[j] > max ? row[j] : max;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < cols; ++j) {
      const float e = exp_approx((row[j] - max) * scale);
      row[j] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) store(out + j, row[j] * inv);
#endif
  }
}

// A small per-head GEMM C[m,n] = A[m,k] . B[k,n] on strided views (strides as MatmulShape's).
MatmulShape head_gemm(int64_t m, int64_t n, int64_t k, int64_t a_row, int64_t a_col, int64_t b_row, int64_t b_col,
                      int64_t c_row, DType operands, DType result) {
  MatmulShape s;
  s.m = m, s.n = n, s.k = k;
  s.a_row = a_row, s.a_col = a_col;
  s.b_row = b_row, s.b_col = b_col;
  s.c_row = c_row;
  s.a_type = operands, s.b_type = operands, s.c_type = result;
  return s;
}

size_t element_size(DType t) { return dtype_size(t); }

}  // namespace

void CpuBackend::attention_forward(const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& out) {
  const AttentionDims a = attention_dims(qkv, heads, "attention_forward");
  const int64_t T = a.tokens, D = a.hidden, hd = a.head_dim;
  VP_REQUIRE(probs.numel() == a.batch * heads * T * T && probs.dtype() == qkv.dtype(),
             "attention_forward: probs must be [B, H, T, T] of the qkv dtype");
  VP_REQUIRE(out.numel() == a.batch * T * D && out.dtype() == qkv.dtype(),
             "attention_forward: out must be [B, T, D] of the qkv dtype");
  const DType type = qkv.dtype();
  const size_t es = element_size(type);

  // S[T,T] = Q[T,hd] . K[T,hd]^T;  O[T,hd] = P[T,T] . V[T,hd]
  const MatmulShape scores = head_gemm(T, T, hd, 3 * D, 1, 1, 3 * D, T, type, DType::f32);
  const MatmulShape context = head_gemm(T, hd, T, T, 1, 3 * D, 1, D, type, out.dtype());
  const auto& scores_mm = matmuls_.prepare(scores);
  const auto& context_mm = matmuls_.prepare(context);

  const int threads = omp_get_max_threads();
  const int64_t scratch_stride = (T * T + 15) / 16 * 16;
  if (static_cast<int64_t>(attention_scratch_.size()) < threads * scratch_stride + 16) {
    attention_scratch_.resize(static_cast<size_t>(threads * scratch_stride + 16));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const char* qkv_bytes = static_cast<const char*>(qkv.raw());
  char* probs_bytes = static_cast<char*>(probs.raw());
  char* out_bytes = static_cast<char*>(out.raw());
  const size_t out_es = element_size(out.dtype());
  float* scratch_base = attention_scratch_.data();

#pragma omp parallel for schedule(static) if (parallel_worth_it(a.batch * T * T * D))
  for (int64_t task = 0; task < a.batch * heads; ++task) {
    const int64_t b = task / heads, h = task % heads;
    float* s = scratch_base + omp_get_thread_num() * scratch_stride;
    const char* q = qkv_bytes + static_cast<size_t>(b * T * 3 * D + h * hd) * es;
    const char* k = q + static_cast<size_t>(D) * es;
    const char* v = q + static_cast<size_t>(2 * D) * es;
    char* p = probs_bytes + static_cast<size_t>(task * T * T) * es;
    matmuls_.run_prepared(scores_mm, q, k, s);
    if (type == DType::f32) {
      softmax_rows(s, reinterpret_cast<float*>(p), T, T, scale);
    } else {
      softmax_rows(s, reinterpret_cast<uint16_t*>(p), T, T, scale);
    }
    char* o = out_bytes + static_cast<size_t>(b * T * D + h * hd) * out_es;
    matmuls_.run_prepared(context_mm, p, v, o);
  }
}

namespace {

// dS = P * (dP - rowsum(dP * P)) * scale, written to ds (the GEMM operand dtype).
template <class P, class S>
void softmax_backward_rows(const P* p, const float* dp, S* ds, int64_t rows, int64_t cols, float scale) {
  for (int64_t i = 0; i < rows; ++i) {
    const P* pr = p + i * cols;
    const float* dpr = dp + i * cols;
    S* out = ds + i * cols;
#ifdef VITPIPE_AVX512
    using namespace simd;
    __m512 vdot = _mm512_setzero_ps();
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 m = tail_mask(cols - j);
      vdot = _mm512_fmadd_ps(load(pr + j, m), load(dpr + j, m), vdot);
    }
    const __m512 dot = _mm512_set1_ps(reduce_add(vdot));
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 m = tail_mask(cols - j);
      store(out + j, _mm512_mul_ps(_mm512_mul_ps(load(pr + j, m), _mm512_sub_ps(load(dpr + j, m), dot)), vscale), m);
    }
#else
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < cols; ++j) dot += load(pr + j) * dpr[j];
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) store(out + j, load(pr + j) * (dpr[j] - dot) * scale);
#endif
  }
}

template <class G>
void write_head_gradient(const float* src, int64_t T, int64_t hd, G* dst, int64_t dst_row, float* colsum) {
  for (int64_t t = 0; t < T; ++t) {
    const float* s = src + t * hd;
    G* d = dst + t * dst_row;
#ifdef VITPIPE_AVX512
    for (int64_t j = 0; j < hd; j += 16) {
      const __mmask16 m = simd::tail_mask(hd - j);
      const __m512 v = simd::load(s + j, m);
      simd::store(d + j, v, m);
      if (colsum) _mm512_mask_storeu_ps(colsum + j, m, _mm512_add_ps(simd::load(colsum + j, m), v));
    }
#else
#pragma omp simd
    for (int64_t j = 0; j < hd; ++j) store(d + j, s[j]);
    if (colsum) {
#pragma omp simd
      for (int64_t j = 0; j < hd; ++j) colsum[j] += s[j];
    }
#endif
  }
}

}  // namespace

void CpuBackend::attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& probs, int64_t heads,
                                    const Tensor& grad_qkv, const Tensor* grad_qkv_bias) {
  const AttentionDims a = attention_dims(qkv, heads, "attention_backward");
  const int64_t T = a.tokens, D = a.hidden, hd = a.head_dim;
  const DType type = qkv.dtype();
  VP_REQUIRE(grad_out.numel() == a.batch * T * D && grad_out.dtype() == type,
             "attention_backward: grad_out must be [B, T, D] of the qkv dtype");
  VP_REQUIRE(probs.numel() == a.batch * heads * T * T && probs.dtype() == type,
             "attention_backward: probs must be [B, H, T, T] of the qkv dtype");
  VP_REQUIRE(grad_qkv.numel() == qkv.numel(), "attention_backward: grad_qkv must be [B, T, 3D]");
  const size_t es = element_size(type);

  // dV = P^T dO;  dP = dO V^T;  dQ = dS K;  dK = dS^T Q  (all [T, hd] or [T, T], into f32 scratch)
  const MatmulShape dv_shape = head_gemm(T, hd, T, 1, T, D, 1, hd, type, DType::f32);
  const MatmulShape dp_shape = head_gemm(T, T, hd, D, 1, 1, 3 * D, T, type, DType::f32);
  const MatmulShape dq_shape = head_gemm(T, hd, T, T, 1, 3 * D, 1, hd, type, DType::f32);
  const MatmulShape dk_shape = head_gemm(T, hd, T, 1, T, 3 * D, 1, hd, type, DType::f32);
  const auto& dv_mm = matmuls_.prepare(dv_shape);
  const auto& dp_mm = matmuls_.prepare(dp_shape);
  const auto& dq_mm = matmuls_.prepare(dq_shape);
  const auto& dk_mm = matmuls_.prepare(dk_shape);

  const int threads = omp_get_max_threads();
  const int64_t tt = (T * T + 15) / 16 * 16;
  const int64_t th = (T * hd + 15) / 16 * 16;
  const int64_t stride = 2 * tt + 3 * th;  // dP (f32), dS (<= f32), dQ, dK, dV (f32)
  if (static_cast<int64_t>(attention_scratch_.size()) < threads * stride + 16) {
    attention_scratch_.resize(static_cast<size_t>(threads * stride + 16));
  }
  float* scratch_base = attention_scratch_.data();
  const bool colsum = grad_qkv_bias != nullptr;
  if (colsum) partials_.reset(threads, 3 * D);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const char* qkv_bytes = static_cast<const char*>(qkv.raw());
  const char* probs_bytes = static_cast<const char*>(probs.raw());
  const char* dout_bytes = static_cast<const char*>(grad_out.raw());
  const DType grad_type = grad_qkv.dtype();
  void* grad_base = grad_qkv.raw();

#pragma omp parallel for schedule(static) if (parallel_worth_it(a.batch * T * T * D))
  for (int64_t task = 0; task < a.batch * heads; ++task) {
    const int64_t b = task / heads, h = task % heads;
    const int thread = omp_get_thread_num();
    float* dp = scratch_base + thread * stride;
    float* ds = dp + tt;
    float* dq = ds + tt;
    float* dk = dq + th;
    float* dv = dk + th;
    const char* q = qkv_bytes + static_cast<size_t>(b * T * 3 * D + h * hd) * es;
    const char* k = q + static_cast<size_t>(D) * es;
    const char* v = q + static_cast<size_t>(2 * D) * es;
    const char* p = probs_bytes + static_cast<size_t>(task * T * T) * es;
    const char* dout = dout_bytes + static_cast<size_t>(b * T * D + h * hd) * es;
    matmuls_.run_prepared(dv_mm, p, dout, dv);
    matmuls_.run_prepared(dp_mm, dout, v, dp);
    if (type == DType::f32) {
      softmax_backward_rows(reinterpret_cast<const float*>(p), dp, ds, T, T, scale);
    } else {
      softmax_backward_rows(reinterpret_cast<const uint16_t*>(p), dp, reinterpret_cast<uint16_t*>(ds), T, T, scale);
    }
    matmuls_.run_prepared(dq_mm, ds, k, dq);
    matmuls_.run_prepared(dk_mm, ds, q, dk);
    float* cs = colsum ? partials_.row(thread) : nullptr;
    const int64_t offset = b * T * 3 * D + h * hd;
    const float* parts[3] = {dq, dk, dv};
    for (int which = 0; which < 3; ++which) {
      // The key bias gradient is exactly zero (softmax ignores the per-row constant q.b_k): summing dK would only
      // add rounding noise, which Adam's normalisation turns into full-size random updates of the key bias.
      float* part_colsum = cs && which != 1 ? cs + which * D + h * hd : nullptr;
      if (grad_type == DType::f32) {
        write_head_gradient(parts[which], T, hd, static_cast<float*>(grad_base) + offset + which * D, 3 * D,
                            part_colsum);
      } else {
        write_head_gradient(parts[which], T, hd, static_cast<uint16_t*>(grad_base) + offset + which * D, 3 * D,
                            part_colsum);
      }
    }
  }
  if (colsum) partials_.add_into(grad_qkv_bias->f32(), 3 * D);
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
