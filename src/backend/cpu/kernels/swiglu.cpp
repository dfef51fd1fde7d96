// SwiGLU feed-forward activation (DINOv2 giant's Dinov2SwiGLUFFN): the fc1 output [M, 2h] splits into x1 | x2 and
// the activation is silu(x1) * x2. Backward: d x1 = g * x2 * silu'(x1), d x2 = g * silu(x1), with
// silu'(z) = s(z) (1 + z (1 - s(z))), s the logistic function; the fc1 bias gradient is fused (column sums).
#include <algorithm>

#include "backend/cpu/kernels/cpu_backend.h"
#include "backend/cpu/kernels/vector_math.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {
namespace {

inline float sigmoid(float z) { return 1.0f / (1.0f + exp_approx(-z)); }

template <class In, class Out>
void swiglu_rows(const In* in, Out* out, int64_t rows, int64_t h) {
#pragma omp parallel for schedule(static) if (parallel_worth_it(rows * h))
  for (int64_t i = 0; i < rows; ++i) {
    const In* x1 = in + i * 2 * h;
    const In* x2 = x1 + h;
    Out* o = out + i * h;
#pragma omp simd
    for (int64_t j = 0; j < h; ++j) {
      const float z = load(x1 + j);
      store(o + j, z * sigmoid(z) * load(x2 + j));
    }
  }
}

template <class T>
void swiglu_backward_rows(const T* grad_out, const T* in, T* grad_in, int64_t rows, int64_t h, ThreadPartials* partials,
                          float* grad_bias) {
  if (partials) partials->reset(omp_get_max_threads(), 2 * h);
#pragma omp parallel if (parallel_worth_it(rows * h))
  {
    float* cs = partials ? partials->row(omp_get_thread_num()) : nullptr;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      const T* go = grad_out + i * h;
      const T* x1 = in + i * 2 * h;
      const T* x2 = x1 + h;
      T* g1 = grad_in + i * 2 * h;
      T* g2 = g1 + h;
#pragma omp simd
      for (int64_t j = 0; j < h; ++j) {
        const float z = load(x1 + j), g = load(go + j);
        const float s = sigmoid(z);
        const float d1 = g * load(x2 + j) * s * (1.0f + z * (1.0f - s));
        const float d2 = g * z * s;
        store(g1 + j, d1);
        store(g2 + j, d2);
        if (cs) {
          cs[j] += d1;
          cs[h + j] += d2;
        }
      }
    }
  }
  if (partials) partials->add_into(grad_bias, 2 * h);
}

}  // namespace

void CpuBackend::swiglu_forward(const Tensor& in, const Tensor& out) {
  const int64_t h2 = in.dim(-1), h = h2 / 2;
  const int64_t rows = in.numel() / std::max<int64_t>(h2, 1);
  VP_REQUIRE(h2 % 2 == 0 && out.numel() == rows * h, "swiglu_forward: ", shape_string(in.shape()), " -> ",
             shape_string(out.shape()));
  const bool in32 = in.dtype() == DType::f32, out32 = out.dtype() == DType::f32;
  if (in32 && out32) {
    swiglu_rows(in.f32(), out.f32(), rows, h);
  } else if (in32) {
    swiglu_rows(in.f32(), out.u16(), rows, h);
  } else if (out32) {
    swiglu_rows(in.u16(), out.f32(), rows, h);
  } else {
    swiglu_rows(in.u16(), out.u16(), rows, h);
  }
}

void CpuBackend::swiglu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                                 const Tensor* grad_bias) {
  const int64_t h2 = in.dim(-1), h = h2 / 2;
  const int64_t rows = in.numel() / std::max<int64_t>(h2, 1);
  VP_REQUIRE(h2 % 2 == 0 && grad_out.numel() == rows * h && grad_in.numel() == in.numel(), "swiglu_backward: shapes ",
             shape_string(grad_out.shape()), ", ", shape_string(in.shape()));
  VP_REQUIRE(grad_out.dtype() == in.dtype() && grad_in.dtype() == in.dtype(),
             "swiglu_backward: expected all-f32 or all-bf16 tensors");
  if (grad_bias) VP_REQUIRE(grad_bias->numel() == h2, "swiglu_backward: bias gradient must have ", h2, " entries");
  ThreadPartials* partials = grad_bias ? &partials_ : nullptr;
  float* bias = grad_bias ? grad_bias->f32() : nullptr;
  if (in.dtype() == DType::f32) {
    swiglu_backward_rows(grad_out.f32(), in.f32(), grad_in.f32(), rows, h, partials, bias);
  } else {
    swiglu_backward_rows(grad_out.u16(), in.u16(), grad_in.u16(), rows, h, partials, bias);
  }
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
