// Patch embedding as a GEMM: images are cut into patches flattened in (channel, ky, kx) order, which is the
// Conv2d(kernel = stride = P) weight [D, C, P, P] viewed as [D, C*P*P]. Then CLS + position embeddings.
#include <algorithm>

#include "backend/cpu/kernels/cpu_backend.h"
#include "backend/cpu/kernels/vector_math.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {
namespace {

template <class Out>
void patchify_impl(const float* images, int64_t batch, int64_t channels, int64_t height, int64_t width, int64_t p,
                   Out* patches) {
  const int64_t gh = height / p, gw = width / p;
  const int64_t patch_dim = channels * p * p;
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth_it(batch * channels * height * width))
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t py = 0; py < gh; ++py) {
      for (int64_t px = 0; px < gw; ++px) {
        Out* dst = patches + ((b * gh + py) * gw + px) * patch_dim;
        for (int64_t c = 0; c < channels; ++c) {
          for (int64_t ky = 0; ky < p; ++ky) {
            const float* src = images + ((b * channels + c) * height + py * p + ky) * width + px * p;
            Out* d = dst + (c * p + ky) * p;
#pragma omp simd
            for (int64_t kx = 0; kx < p; ++kx) store(d + kx, src[kx]);
          }
        }
      }
    }
  }
}

template <class G>
void embeddings_backward_impl(const float* grad_x, int64_t batch, int64_t tokens, int64_t d, float* grad_cls,
                              float* grad_pos, G* grad_patch, ThreadPartials& bias_partials, float* grad_bias) {
  // Position gradient = sum over the batch; threads split tokens so each owns its rows (no reduction needed).
#pragma omp parallel for schedule(static) if (parallel_worth_it(batch * tokens * d))
  for (int64_t t = 0; t < tokens; ++t) {
    float* gp = grad_pos + t * d;
    for (int64_t b = 0; b < batch; ++b) {
      const float* g = grad_x + (b * tokens + t) * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) gp[j] += g[j];
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    const float* g = grad_x + b * tokens * d;
    for (int64_t j = 0; j < d; ++j) grad_cls[j] += g[j];
  }
  const bool bias = grad_bias != nullptr;
  if (bias) bias_partials.reset(omp_get_max_threads(), d);
#pragma omp parallel if (parallel_worth_it(batch * tokens * d))
  {
    float* cs = bias ? bias_partials.row(omp_get_thread_num()) : nullptr;
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 1; t < tokens; ++t) {
        const float* g = grad_x + (b * tokens + t) * d;
        G* out = grad_patch + (b * (tokens - 1) + t - 1) * d;
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

void CpuBackend::patchify(const Tensor& images, int64_t patch, const Tensor& patches) {
  VP_REQUIRE(images.rank() == 4 && images.dtype() == DType::f32, "patchify: images must be [B, C, H, W] f32, got ",
             shape_string(images.shape()));
  const int64_t b = images.dim(0), c = images.dim(1), h = images.dim(2), w = images.dim(3);
  VP_REQUIRE(h % patch == 0 && w % patch == 0, "patchify: image ", h, "x", w, " is not a multiple of patch ", patch);
  VP_REQUIRE(patches.numel() == images.numel(), "patchify: output must hold every pixel");
  if (patches.dtype() == DType::f32) {
    patchify_impl(images.f32(), b, c, h, w, patch, patches.f32());
  } else {
    patchify_impl(images.f32(), b, c, h, w, patch, patches.u16());
  }
}

void CpuBackend::embeddings_forward(const Tensor& patch_proj, const Tensor& cls, const Tensor& pos, const Tensor& x) {
  VP_REQUIRE(x.rank() == 3, "embeddings_forward: x must be [B, T, D]");
  const int64_t batch = x.dim(0), tokens = x.dim(1), d = x.dim(2);
  VP_REQUIRE(patch_proj.numel() == batch * (tokens - 1) * d && cls.numel() == d && pos.numel() == tokens * d,
             "embeddings_forward: inconsistent shapes");
  const float* proj = patch_proj.f32();
  const float* c = cls.f32();
  const float* p = pos.f32();
  float* out = x.f32();
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth_it(batch * tokens * d))
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < tokens; ++t) {
      const float* src = t == 0 ? c : proj + (b * (tokens - 1) + t - 1) * d;
      const float* pt = p + t * d;
      float* dst = out + (b * tokens + t) * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) dst[j] = src[j] + pt[j];
    }
  }
}

void CpuBackend::embeddings_backward(const Tensor& grad_x, const Tensor& grad_cls, const Tensor& grad_pos,
                                     const Tensor& grad_patch_proj, const Tensor* grad_patch_bias) {
  VP_REQUIRE(grad_x.rank() == 3, "embeddings_backward: grad_x must be [B, T, D]");
  const int64_t batch = grad_x.dim(0), tokens = grad_x.dim(1), d = grad_x.dim(2);
  VP_REQUIRE(
      grad_patch_proj.numel() == batch * (tokens - 1) * d && grad_cls.numel() == d && grad_pos.numel() == tokens * d,
      "embeddings_backward: inconsistent shapes");
  float* bias = grad_patch_bias ? grad_patch_bias->f32() : nullptr;
  if (grad_patch_proj.dtype() == DType::f32) {
    embeddings_backward_impl(grad_x.f32(), batch, tokens, d, grad_cls.f32(), grad_pos.f32(), grad_patch_proj.f32(),
                             partials_, bias);
  } else {
    embeddings_backward_impl(grad_x.f32(), batch, tokens, d, grad_cls.f32(), grad_pos.f32(), grad_patch_proj.u16(),
                             partials_, bias);
  }
}

void CpuBackend::gather_cls(const Tensor& x, const Tensor& out) {
  VP_REQUIRE(x.rank() == 3 && out.numel() == x.dim(0) * x.dim(2), "gather_cls: shapes");
  const int64_t batch = x.dim(0), tokens = x.dim(1), d = x.dim(2);
  for (int64_t b = 0; b < batch; ++b) {
    const float* src = x.f32() + b * tokens * d;
    float* dst = out.f32() + b * d;
    for (int64_t j = 0; j < d; ++j) dst[j] = src[j];
  }
}

void CpuBackend::scatter_cls(const Tensor& grad, const Tensor& grad_x) {
  VP_REQUIRE(grad_x.rank() == 3 && grad.numel() == grad_x.dim(0) * grad_x.dim(2), "scatter_cls: shapes");
  const int64_t batch = grad_x.dim(0), tokens = grad_x.dim(1), d = grad_x.dim(2);
#pragma omp parallel for schedule(static) if (parallel_worth_it(batch * tokens * d))
  for (int64_t b = 0; b < batch; ++b) {
    float* dst = grad_x.f32() + b * tokens * d;
    const float* src = grad.f32() + b * d;
    for (int64_t j = 0; j < d; ++j) dst[j] = src[j];
    std::fill(dst + d, dst + tokens * d, 0.0f);
  }
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
