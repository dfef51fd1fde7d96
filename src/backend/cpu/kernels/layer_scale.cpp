// LayerScale (DINOv2): a per-channel gain on a residual branch, out = residual + lambda * branch. One streaming pass
// each way; the backward pass also produces the lambda gradient and the column sums that are the bias gradient of
// the linear layer feeding the branch (so no other kernel has to fuse them). And `scale`, out = factor * in.
#include "backend/cpu/kernels/cpu_backend.h"
#include "backend/cpu/kernels/vector_math.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {
namespace {

template <class B>
void layer_scale_rows(const B* branch, const float* scale, const float* residual, float* out, int64_t rows, int64_t d) {
#pragma omp parallel for schedule(static) if (parallel_worth_it(rows * d))
  for (int64_t i = 0; i < rows; ++i) {
    const B* b = branch + i * d;
    const float* r = residual + i * d;
    float* o = out + i * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) o[j] = r[j] + scale[j] * load(b + j);
  }
}

template <class B, class G>
void layer_scale_backward_rows(const float* grad, const B* branch, const float* scale, G* branch_grad, int64_t rows,
                               int64_t d, ThreadPartials& scale_partials, float* grad_scale,
                               ThreadPartials& bias_partials, float* grad_bias) {
  const int threads = omp_get_max_threads();
  if (grad_scale) scale_partials.reset(threads, d);
  if (grad_bias) bias_partials.reset(threads, d);
#pragma omp parallel if (parallel_worth_it(rows * d))
  {
    float* gs = grad_scale ? scale_partials.row(omp_get_thread_num()) : nullptr;
    float* gb = grad_bias ? bias_partials.row(omp_get_thread_num()) : nullptr;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      const float* g = grad + i * d;
      const B* b = branch + i * d;
      G* bg = branch_grad + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) store(bg + j, scale[j] * g[j]);
      if (gs) {
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) gs[j] += g[j] * load(b + j);
      }
      if (gb) {
        // The bias sees the branch gradient before rounding (as the fused column sums elsewhere do).
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) gb[j] += scale[j] * g[j];
      }
    }
  }
  if (grad_scale) scale_partials.add_into(grad_scale, d);
  if (grad_bias) bias_partials.add_into(grad_bias, d);
}

template <class In, class Out>
void scale_elements(const In* in, float factor, Out* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (parallel_worth_it(n))
  for (int64_t i = 0; i < n; ++i) store(out + i, factor * load(in + i));
}

}  // namespace

void CpuBackend::layer_scale_forward(const Tensor& branch, const Tensor& scale, const Tensor& residual,
                                     const Tensor& out) {
  const int64_t d = scale.numel();
  const int64_t rows = out.numel() / d;
  VP_REQUIRE(d > 0 && out.numel() == rows * d && branch.numel() == out.numel() && residual.numel() == out.numel() &&
                 out.dtype() == DType::f32 && residual.dtype() == DType::f32 && scale.dtype() == DType::f32,
             "layer_scale_forward: shapes ", shape_string(branch.shape()), " x ", shape_string(scale.shape()), " -> ",
             shape_string(out.shape()));
  if (branch.dtype() == DType::f32) {
    layer_scale_rows(branch.f32(), scale.f32(), residual.f32(), out.f32(), rows, d);
  } else {
    layer_scale_rows(branch.u16(), scale.f32(), residual.f32(), out.f32(), rows, d);
  }
}

void CpuBackend::layer_scale_backward(const Tensor& grad, const Tensor& branch, const Tensor& scale,
                                      const Tensor& branch_grad, const Tensor* grad_scale, const Tensor* grad_bias) {
  const int64_t d = scale.numel();
  const int64_t rows = grad.numel() / d;
  VP_REQUIRE(d > 0 && grad.numel() == rows * d && branch.numel() == grad.numel() &&
                 branch_grad.numel() == grad.numel() && grad.dtype() == DType::f32,
             "layer_scale_backward: shapes ", shape_string(grad.shape()), " x ", shape_string(scale.shape()));
  if (grad_scale) VP_REQUIRE(grad_scale->numel() == d, "layer_scale_backward: scale gradient must have ", d);
  if (grad_bias) VP_REQUIRE(grad_bias->numel() == d, "layer_scale_backward: bias gradient must have ", d);
  float* gs = grad_scale ? grad_scale->f32() : nullptr;
  float* gb = grad_bias ? grad_bias->f32() : nullptr;
  const bool b32 = branch.dtype() == DType::f32, g32 = branch_grad.dtype() == DType::f32;
  if (b32 && g32) {
    layer_scale_backward_rows(grad.f32(), branch.f32(), scale.f32(), branch_grad.f32(), rows, d, partials_, gs,
                              partials2_, gb);
  } else if (b32) {
    layer_scale_backward_rows(grad.f32(), branch.f32(), scale.f32(), branch_grad.u16(), rows, d, partials_, gs,
                              partials2_, gb);
  } else if (g32) {
    layer_scale_backward_rows(grad.f32(), branch.u16(), scale.f32(), branch_grad.f32(), rows, d, partials_, gs,
                              partials2_, gb);
  } else {
    layer_scale_backward_rows(grad.f32(), branch.u16(), scale.f32(), branch_grad.u16(), rows, d, partials_, gs,
                              partials2_, gb);
  }
}

void CpuBackend::scale(const Tensor& in, double factor, const Tensor& out) {
  VP_REQUIRE(in.numel() == out.numel(), "scale: element counts differ");
  const float f = static_cast<float>(factor);
  const bool in32 = in.dtype() == DType::f32, out32 = out.dtype() == DType::f32;
  if (in32 && out32) {
    scale_elements(in.f32(), f, out.f32(), in.numel());
  } else if (in32) {
    scale_elements(in.f32(), f, out.u16(), in.numel());
  } else if (out32) {
    scale_elements(in.u16(), f, out.f32(), in.numel());
  } else {
    scale_elements(in.u16(), f, out.u16(), in.numel());
  }
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
