// Attention for the classifier token alone. In the final block nothing reads the other tokens' outputs, so only
// token 0's query attends; keys and values still come from every token. The work per (batch, head) pair is
// O(T * head_dim), memory-bound, so plain vectorised loops do it; the pairs are spread over the threads. Like the
// full attention it saves token 0's log-sum-exp, and the backward pass recomputes the probabilities from it.
#include <cmath>

#include "backend/cpu/kernels/attention_dims.h"
#include "backend/cpu/kernels/cpu_backend.h"
#include "backend/cpu/kernels/vector_math.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {
namespace {

template <class T>
float dot(const float* x, const T* y, int64_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) sum += x[j] * load(y + j);
  return sum;
}

// One (batch, head) pair: q at token 0; k, v rows `row` elements apart. scratch: tokens + head_dim floats. Saves the
// log-sum-exp of the scaled scores (cuDNN's stats), not the probabilities.
template <class T>
void forward_pair(const T* q, const T* k, const T* v, int64_t tokens, int64_t row, int64_t hd, float scale,
                  float* scratch, float* lse, T* out) {
  float* scores = scratch;
  float* acc = scratch + tokens;
#pragma omp simd
  for (int64_t j = 0; j < hd; ++j) acc[j] = load(q + j);
  float max = -INFINITY;
  for (int64_t t = 0; t < tokens; ++t) {
    scores[t] = dot(acc, k + t * row, hd) * scale;
    max = scores[t] > max ? scores[t] : max;
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t t = 0; t < tokens; ++t) {
    scores[t] = exp_approx(scores[t] - max);
    sum += scores[t];
  }
  *lse = max + std::log(sum);
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t j = 0; j < hd; ++j) acc[j] = 0.0f;
  for (int64_t t = 0; t < tokens; ++t) {
    const float p = scores[t] * inv;
    const T* vt = v + t * row;
#pragma omp simd
    for (int64_t j = 0; j < hd; ++j) acc[j] += p * load(vt + j);
  }
#pragma omp simd
  for (int64_t j = 0; j < hd; ++j) store(out + j, acc[j]);
}

// p_t = exp(q.k_t * scale - lse) recomputed; D = dO.o (FlashAttention-2); dV_t = p_t dO;
// dS_t = p_t (dO.v_t - D) * scale; dQ = sum_t dS_t k_t; dK_t = dS_t q.
// `colsum` (optional) adds the query and value gradients' column sums at their offsets (key: exactly zero).
template <class T, class G>
void backward_pair(const T* q, const T* k, const T* v, const T* o, float lse, const T* dout, int64_t tokens,
                   int64_t row, int64_t hd, float scale, float* scratch, G* gq, G* gk, G* gv, int64_t grad_row,
                   float* colsum_q, float* colsum_v) {
  float* dq = scratch;
  float* qf = dq + hd;
  float* dof = qf + hd;
  float weighted = 0.0f;
#pragma omp simd reduction(+ : weighted)
  for (int64_t j = 0; j < hd; ++j) {
    qf[j] = load(q + j);
    dof[j] = load(dout + j);
    dq[j] = 0.0f;
    weighted += dof[j] * load(o + j);
  }
  for (int64_t t = 0; t < tokens; ++t) {
    const T* kt = k + t * row;
    const float p = exp_approx(dot(qf, kt, hd) * scale - lse);
    const float ds = p * (dot(dof, v + t * row, hd) - weighted) * scale;
    G* out_v = gv + t * grad_row;
    G* out_k = gk + t * grad_row;
#pragma omp simd
    for (int64_t j = 0; j < hd; ++j) {
      store(out_v + j, p * dof[j]);
      dq[j] += ds * load(kt + j);
      store(out_k + j, ds * qf[j]);
    }
    if (colsum_v) {
#pragma omp simd
      for (int64_t j = 0; j < hd; ++j) colsum_v[j] += p * dof[j];
    }
  }
#pragma omp simd
  for (int64_t j = 0; j < hd; ++j) store(gq + j, dq[j]);
  if (colsum_q) {
#pragma omp simd
    for (int64_t j = 0; j < hd; ++j) colsum_q[j] += dq[j];
  }
  for (int64_t t = 1; t < tokens; ++t) {
    G* out = gq + t * grad_row;
#pragma omp simd
    for (int64_t j = 0; j < hd; ++j) store(out + j, 0.0f);
  }
}

template <class T, class G>
void backward_all(const AttentionDims& a, const T* qkv, const T* out, const float* lse, const T* dout, G* grad,
                  float* scratch, int64_t scratch_stride, ThreadPartials* partials) {
  const int64_t tokens = a.tokens, D = a.hidden, hd = a.head_dim, row = 3 * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel for schedule(static) if (parallel_worth_it(a.batch * tokens * D))
  for (int64_t task = 0; task < a.batch * a.heads; ++task) {
    const int64_t b = task / a.heads, h = task % a.heads;
    const int thread = omp_get_thread_num();
    const int64_t offset = b * tokens * row + h * hd;
    float* cs = partials ? partials->row(thread) : nullptr;
    backward_pair(qkv + offset, qkv + offset + D, qkv + offset + 2 * D, out + b * D + h * hd, lse[task],
                  dout + b * D + h * hd, tokens, row, hd, scale, scratch + thread * scratch_stride, grad + offset,
                  grad + offset + D, grad + offset + 2 * D, row, cs ? cs + h * hd : nullptr,
                  cs ? cs + 2 * D + h * hd : nullptr);
  }
}

}  // namespace

void CpuBackend::cls_attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) {
  const AttentionDims a = attention_dims(qkv, heads, "cls_attention_forward");
  const int64_t T = a.tokens, D = a.hidden, hd = a.head_dim;
  VP_REQUIRE(lse.numel() == a.batch * heads && lse.dtype() == DType::f32,
             "cls_attention_forward: lse must be [B, H] f32");
  VP_REQUIRE(out.numel() == a.batch * D && out.dtype() == qkv.dtype(),
             "cls_attention_forward: out must be [B, D] of the qkv dtype");
  const int threads = omp_get_max_threads();
  const int64_t stride = (T + hd + 15) / 16 * 16;
  if (static_cast<int64_t>(attention_scratch_.size()) < threads * stride) {
    attention_scratch_.resize(static_cast<size_t>(threads * stride));
  }
  float* scratch = attention_scratch_.data();
  float* lse_data = lse.f32();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto run = [&](auto* qkv_data, auto* out_data) {
#pragma omp parallel for schedule(static) if (parallel_worth_it(a.batch * T * D))
    for (int64_t task = 0; task < a.batch * heads; ++task) {
      const int64_t b = task / heads, h = task % heads;
      const auto* q = qkv_data + b * T * 3 * D + h * hd;
      forward_pair(q, q + D, q + 2 * D, T, 3 * D, hd, scale, scratch + omp_get_thread_num() * stride, lse_data + task,
                   out_data + b * D + h * hd);
    }
  };
  if (qkv.dtype() == DType::f32) {
    run(qkv.f32(), out.f32());
  } else {
    VP_REQUIRE(qkv.dtype() == DType::bf16, "cls_attention_forward: qkv must be f32 or bf16");
    run(static_cast<const uint16_t*>(qkv.raw()), static_cast<uint16_t*>(out.raw()));
  }
}

void CpuBackend::cls_attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                        int64_t heads, const Tensor& grad_qkv, const Tensor* grad_qkv_bias) {
  const AttentionDims a = attention_dims(qkv, heads, "cls_attention_backward");
  const int64_t D = a.hidden, hd = a.head_dim;
  const DType type = qkv.dtype();
  VP_REQUIRE(type == DType::f32 || type == DType::bf16, "cls_attention_backward: qkv must be f32 or bf16");
  VP_REQUIRE(
      grad_out.numel() == a.batch * D && grad_out.dtype() == type && out.numel() == a.batch * D && out.dtype() == type,
      "cls_attention_backward: grad_out and out must be [B, D] of the qkv dtype");
  VP_REQUIRE(lse.numel() == a.batch * heads && lse.dtype() == DType::f32,
             "cls_attention_backward: lse must be [B, H] f32");
  VP_REQUIRE(grad_qkv.numel() == qkv.numel() && (grad_qkv.dtype() == DType::f32 || grad_qkv.dtype() == DType::bf16),
             "cls_attention_backward: grad_qkv must be [B, T, 3D] f32 or bf16");
  const int threads = omp_get_max_threads();
  const int64_t stride = (3 * hd + 15) / 16 * 16;
  if (static_cast<int64_t>(attention_scratch_.size()) < threads * stride) {
    attention_scratch_.resize(static_cast<size_t>(threads * stride));
  }
  ThreadPartials* partials = grad_qkv_bias ? &partials_ : nullptr;
  if (partials) partials->reset(threads, 3 * D);
  float* scratch = attention_scratch_.data();
  const float* lse_data = lse.f32();
  auto with_grad = [&](const auto* qkv_data, const auto* out_data, const auto* dout_data) {
    if (grad_qkv.dtype() == DType::f32) {
      backward_all(a, qkv_data, out_data, lse_data, dout_data, grad_qkv.f32(), scratch, stride, partials);
    } else {
      backward_all(a, qkv_data, out_data, lse_data, dout_data, static_cast<uint16_t*>(grad_qkv.raw()), scratch, stride,
                   partials);
    }
  };
  if (type == DType::f32) {
    with_grad(qkv.f32(), out.f32(), grad_out.f32());
  } else {
    with_grad(static_cast<const uint16_t*>(qkv.raw()), static_cast<const uint16_t*>(out.raw()),
              static_cast<const uint16_t*>(grad_out.raw()));
  }
  if (partials) partials->add_into(grad_qkv_bias->f32(), 3 * D);
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
