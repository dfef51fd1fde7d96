// Token bookkeeping of the model families: embeddings with several prefix tokens (DeiT's distillation token,
// DINOv2's registers, which carry no position embedding), the first K tokens gathered token-major for a head that
// reads CLS and the distillation token, and DINOv2's classifier input [CLS, mean of the patch tokens]. All memory-
// bound single passes; batch-summed gradients are reduced per token by the thread that owns it (no partials).
#include <algorithm>

#include "backend/cpu/kernels/cpu_backend.h"
#include "backend/cpu/kernels/vector_math.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {
namespace {

template <class G>
void token_embeddings_backward_impl(const float* grad_x, int64_t batch, int64_t tokens, int64_t prefix,
                                    int64_t positioned, int64_t d, float* grad_prefix, float* grad_pos, G* grad_patch,
                                    ThreadPartials& bias_partials, float* grad_bias) {
  const int64_t patches = tokens - prefix;
  // Token t's parameter gradient rows (its prefix row and/or position row), summed over the batch by one thread.
#pragma omp parallel for schedule(static) if (parallel_worth_it(batch * tokens * d))
  for (int64_t t = 0; t < tokens; ++t) {
    float* gp = nullptr;
    if (grad_pos)
      gp = t < prefix ? (t < positioned ? grad_pos + t * d : nullptr) : grad_pos + (positioned + t - prefix) * d;
    float* gt = grad_prefix && t < prefix ? grad_prefix + t * d : nullptr;
    for (int64_t b = 0; b < batch; ++b) {
      const float* g = grad_x + (b * tokens + t) * d;
      if (gp) {
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) gp[j] += g[j];
      }
      if (gt) {
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) gt[j] += g[j];
      }
    }
  }
  const bool bias = grad_bias != nullptr;
  if (bias) bias_partials.reset(omp_get_max_threads(), d);
#pragma omp parallel if (parallel_worth_it(batch * tokens * d))
  {
    float* cs = bias ? bias_partials.row(omp_get_thread_num()) : nullptr;
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t p = 0; p < patches; ++p) {
        const float* g = grad_x + (b * tokens + prefix + p) * d;
        G* out = grad_patch + (b * patches + p) * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) store(out + j, g[j]);
        if (cs) {
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) cs[j] += g[j];
        }
      }
    }
  }
  if (bias) bias_partials.add_into(grad_bias, d);
}

}  // namespace

void CpuBackend::token_embeddings_forward(const Tensor& patch_proj, const Tensor& prefix, int64_t positioned,
                                          const Tensor& pos, const Tensor& x) {
  VP_REQUIRE(x.rank() == 3, "token_embeddings_forward: x must be [B, T, D]");
  const int64_t batch = x.dim(0), tokens = x.dim(1), d = x.dim(2);
  const int64_t p_count = prefix.numel() / std::max<int64_t>(d, 1), patches = tokens - p_count;
  VP_REQUIRE(prefix.numel() == p_count * d && p_count >= 1 && positioned >= 0 && positioned <= p_count &&
                 patches >= 0 && patch_proj.numel() == batch * patches * d && pos.numel() == (positioned + patches) * d,
             "token_embeddings_forward: inconsistent shapes");
  const float* proj = patch_proj.f32();
  const float* pre = prefix.f32();
  const float* p = pos.f32();
  float* out = x.f32();
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth_it(batch * tokens * d))
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < tokens; ++t) {
      float* dst = out + (b * tokens + t) * d;
      if (t < p_count) {
        const float* src = pre + t * d;
        if (t < positioned) {
          const float* pt = p + t * d;
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) dst[j] = src[j] + pt[j];
        } else {
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) dst[j] = src[j];
        }
      } else {
        const float* src = proj + (b * patches + t - p_count) * d;
        const float* pt = p + (positioned + t - p_count) * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) dst[j] = src[j] + pt[j];
      }
    }
  }
}

void CpuBackend::token_embeddings_backward(const Tensor& grad_x, const Tensor* grad_prefix, int64_t positioned,
                                           const Tensor* grad_pos, const Tensor& grad_patch_proj,
                                           const Tensor* grad_patch_bias) {
  VP_REQUIRE(grad_x.rank() == 3, "token_embeddings_backward: grad_x must be [B, T, D]");
  const int64_t batch = grad_x.dim(0), tokens = grad_x.dim(1), d = grad_x.dim(2);
  const int64_t patches = grad_patch_proj.numel() / std::max<int64_t>(batch * d, 1);
  const int64_t p_count = tokens - patches;
  VP_REQUIRE(grad_patch_proj.numel() == batch * patches * d && p_count >= 1 && positioned <= p_count,
             "token_embeddings_backward: inconsistent shapes");
  if (grad_prefix) VP_REQUIRE(grad_prefix->numel() == p_count * d, "token_embeddings_backward: prefix shape");
  if (grad_pos) VP_REQUIRE(grad_pos->numel() == (positioned + patches) * d, "token_embeddings_backward: pos shape");
  float* gpre = grad_prefix ? grad_prefix->f32() : nullptr;
  float* gpos = grad_pos ? grad_pos->f32() : nullptr;
  float* bias = grad_patch_bias ? grad_patch_bias->f32() : nullptr;
  if (grad_patch_proj.dtype() == DType::f32) {
    token_embeddings_backward_impl(grad_x.f32(), batch, tokens, p_count, positioned, d, gpre, gpos,
                                   grad_patch_proj.f32(), partials_, bias);
  } else {
    token_embeddings_backward_impl(grad_x.f32(), batch, tokens, p_count, positioned, d, gpre, gpos,
                                   grad_patch_proj.u16(), partials_, bias);
  }
}

void CpuBackend::gather_tokens(const Tensor& x, int64_t count, const Tensor& out) {
  VP_REQUIRE(x.rank() == 3 && count >= 1 && count <= x.dim(1) && out.numel() == count * x.dim(0) * x.dim(2),
             "gather_tokens: shapes");
  const int64_t batch = x.dim(0), tokens = x.dim(1), d = x.dim(2);
  for (int64_t k = 0; k < count; ++k) {
    for (int64_t b = 0; b < batch; ++b) std::copy_n(x.f32() + (b * tokens + k) * d, d, out.f32() + (k * batch + b) * d);
  }
}

void CpuBackend::scatter_tokens(const Tensor& grad, const Tensor& grad_x) {
  VP_REQUIRE(grad_x.rank() == 3, "scatter_tokens: grad_x must be [B, T, D]");
  const int64_t batch = grad_x.dim(0), tokens = grad_x.dim(1), d = grad_x.dim(2);
  const int64_t count = grad.numel() / std::max<int64_t>(batch * d, 1);
  VP_REQUIRE(grad.numel() == count * batch * d && count <= tokens, "scatter_tokens: shapes");
#pragma omp parallel for schedule(static) if (parallel_worth_it(batch * tokens * d))
  for (int64_t b = 0; b < batch; ++b) {
    float* dst = grad_x.f32() + b * tokens * d;
    for (int64_t k = 0; k < count; ++k) std::copy_n(grad.f32() + (k * batch + b) * d, d, dst + k * d);
    std::fill(dst + count * d, dst + tokens * d, 0.0f);
  }
}

void CpuBackend::cls_and_mean_forward(const Tensor& x, int64_t skip, const Tensor& out) {
  VP_REQUIRE(x.rank() == 3 && skip >= 1 && skip < x.dim(1) && out.numel() == 2 * x.dim(0) * x.dim(2),
             "cls_and_mean_forward: shapes");
  const int64_t batch = x.dim(0), tokens = x.dim(1), d = x.dim(2);
  const float inv = 1.0f / static_cast<float>(tokens - skip);
#pragma omp parallel for schedule(static) if (parallel_worth_it(batch * tokens * d))
  for (int64_t b = 0; b < batch; ++b) {
    const float* src = x.f32() + b * tokens * d;
    float* dst = out.f32() + b * 2 * d;
    std::copy_n(src, d, dst);
    float* mean = dst + d;
    std::fill(mean, mean + d, 0.0f);
    for (int64_t t = skip; t < tokens; ++t) {
      const float* row = src + t * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) mean[j] += row[j];
    }
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) mean[j] *= inv;
  }
}

void CpuBackend::cls_and_mean_backward(const Tensor& grad, int64_t skip, const Tensor& grad_x) {
  VP_REQUIRE(
      grad_x.rank() == 3 && skip >= 1 && skip < grad_x.dim(1) && grad.numel() == 2 * grad_x.dim(0) * grad_x.dim(2),
      "cls_and_mean_backward: shapes");
  const int64_t batch = grad_x.dim(0), tokens = grad_x.dim(1), d = grad_x.dim(2);
  const float inv = 1.0f / static_cast<float>(tokens - skip);
#pragma omp parallel for schedule(static) if (parallel_worth_it(batch * tokens * d))
  for (int64_t b = 0; b < batch; ++b) {
    const float* g = grad.f32() + b * 2 * d;
    float* dst = grad_x.f32() + b * tokens * d;
    std::copy_n(g, d, dst);
    std::fill(dst + d, dst + skip * d, 0.0f);
    for (int64_t t = skip; t < tokens; ++t) {
      float* row = dst + t * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) row[j] = g[d + j] * inv;
    }
  }
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
