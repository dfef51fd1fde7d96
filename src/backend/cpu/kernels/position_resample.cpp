// Position embeddings resampled to another patch grid in the forward pass (DINOv2 interpolates them to every input's
// grid). The map is separable and linear: rows first (the x weights), then columns (the y weights), with the weights
// given as dense [out, in] matrices (the model layer computes them: bicubic with or without antialiasing,
// model/position_interpolation.h), zero weights skipped. The backward pass applies the transpose in reverse order.
// Work is O(grid^2 * taps * D): a few tens of MFLOP for ViT-B at 518 -> 224, far below one block.
#include <algorithm>
#include <vector>

#include "backend/cpu/kernels/cpu_backend.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {
namespace {

struct Grids {
  int64_t kept, d, hs, ws, hd, wd;
};

Grids check_grids(const Tensor& src, int64_t kept, const Tensor& wy, const Tensor& wx, const Tensor& dst,
                  const char* what) {
  VP_REQUIRE(wy.rank() == 2 && wx.rank() == 2 && src.rank() == 2 && dst.rank() == 2 && src.dim(1) == dst.dim(1), what,
             ": expected 2-D positions and weights");
  Grids g{kept, src.dim(1), wy.dim(1), wx.dim(1), wy.dim(0), wx.dim(0)};
  VP_REQUIRE(src.dim(0) == kept + g.hs * g.ws && dst.dim(0) == kept + g.hd * g.wd, what, ": positions ",
             shape_string(src.shape()), " -> ", shape_string(dst.shape()), " do not match weights ",
             shape_string(wy.shape()), " x ", shape_string(wx.shape()));
  return g;
}

// out[o, :] (+)= sum_i w[o, i] in[i, :] for `count` independent [in_rows, d] / [out_rows, d] slabs, strided.
void weighted_rows(const float* w, int64_t out_rows, int64_t in_rows, const float* in, int64_t in_stride, float* out,
                   int64_t out_stride, int64_t d, bool accumulate) {
  for (int64_t o = 0; o < out_rows; ++o) {
    float* dst = out + o * out_stride;
    if (!accumulate) std::fill(dst, dst + d, 0.0f);
    for (int64_t i = 0; i < in_rows; ++i) {
      const float wi = w[o * in_rows + i];
      if (wi == 0.0f) continue;
      const float* src = in + i * in_stride;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) dst[j] += wi * src[j];
    }
  }
}

// The transpose of weighted_rows: out[i, :] += sum_o w[o, i] in[o, :].
void weighted_rows_transposed(const float* w, int64_t out_rows, int64_t in_rows, const float* grad, int64_t g_stride,
                              float* out, int64_t o_stride, int64_t d) {
  for (int64_t i = 0; i < in_rows; ++i) {
    float* dst = out + i * o_stride;
    for (int64_t o = 0; o < out_rows; ++o) {
      const float wi = w[o * in_rows + i];
      if (wi == 0.0f) continue;
      const float* src = grad + o * g_stride;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) dst[j] += wi * src[j];
    }
  }
}

}  // namespace

void CpuBackend::resample_positions_forward(const Tensor& pos, int64_t kept, const Tensor& wy, const Tensor& wx,
                                            const Tensor& out) {
  const Grids g = check_grids(pos, kept, wy, wx, out, "resample_positions_forward");
  std::copy_n(pos.f32(), kept * g.d, out.f32());
  // [hs, wd, d]: rows resampled along x. One buffer shared by the team (a thread_local would be each worker's own).
  std::vector<float> buffer(static_cast<size_t>(g.hs * g.wd * g.d));
  float* tmp = buffer.data();
  const float* src = pos.f32() + kept * g.d;
  float* dst = out.f32() + kept * g.d;
#pragma omp parallel for schedule(static) if (parallel_worth_it(g.hs * g.wd * g.ws * g.d))
  for (int64_t i = 0; i < g.hs; ++i) {
    weighted_rows(wx.f32(), g.wd, g.ws, src + i * g.ws * g.d, g.d, tmp + i * g.wd * g.d, g.d, g.d, false);
  }
#pragma omp parallel for schedule(static) if (parallel_worth_it(g.hd * g.wd * g.hs * g.d))
  for (int64_t x = 0; x < g.wd; ++x) {
    weighted_rows(wy.f32(), g.hd, g.hs, tmp + x * g.d, g.wd * g.d, dst + x * g.d, g.wd * g.d, g.d, false);
  }
}

void CpuBackend::resample_positions_backward(const Tensor& grad_out, int64_t kept, const Tensor& wy, const Tensor& wx,
                                             const Tensor& grad_pos) {
  const Grids g = check_grids(grad_pos, kept, wy, wx, grad_out, "resample_positions_backward");
  for (int64_t i = 0; i < kept * g.d; ++i) grad_pos.f32()[i] += grad_out.f32()[i];
  std::vector<float> buffer(static_cast<size_t>(g.hs * g.wd * g.d), 0.0f);  // [hs, wd, d]: before the y map
  float* tmp = buffer.data();
  const float* grad = grad_out.f32() + kept * g.d;
  float* dst = grad_pos.f32() + kept * g.d;
#pragma omp parallel for schedule(static) if (parallel_worth_it(g.hd * g.wd * g.hs * g.d))
  for (int64_t x = 0; x < g.wd; ++x) {
    weighted_rows_transposed(wy.f32(), g.hd, g.hs, grad + x * g.d, g.wd * g.d, tmp + x * g.d, g.wd * g.d, g.d);
  }
#pragma omp parallel for schedule(static) if (parallel_worth_it(g.hs * g.wd * g.ws * g.d))
  for (int64_t i = 0; i < g.hs; ++i) {
    weighted_rows_transposed(wx.f32(), g.wd, g.ws, tmp + i * g.wd * g.d, g.d, dst + i * g.ws * g.d, g.d, g.d);
  }
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
