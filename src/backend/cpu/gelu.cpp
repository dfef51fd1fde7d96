// Exact (erf) GELU. Forward reads the pre-activation once and writes the activation (f32 or bf16: it only feeds
// the next GEMM). Backward fuses the fc1 bias gradient (column sums, fp32) into the same pass.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vector_math.h"
#include "util/error.h"

namespace vitpipe::cpu {
namespace {

template <class Out>
void gelu_rows(const float* in, Out* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (parallel_worth_it(n))
  for (int64_t i = 0; i < n; ++i) store(out + i, gelu(in[i]));
}

template <class GradOut, class GradIn>
void gelu_backward_rows(const GradOut* grad_out, const float* in, GradIn* grad_in, int64_t rows, int64_t cols,
                        ThreadPartials* partials, float* grad_bias) {
  if (partials) partials->reset(omp_get_max_threads(), cols);
#pragma omp parallel if (parallel_worth_it(rows * cols))
  {
    float* cs = partials ? partials->row(omp_get_thread_num()) : nullptr;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      const GradOut* go = grad_out + i * cols;
      const float* x = in + i * cols;
      GradIn* gi = grad_in + i * cols;
      if (cs) {
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) {
          const float g = load(go + j) * gelu_derivative(x[j]);
          store(gi + j, g);
          cs[j] += g;
        }
      } else {
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) store(gi + j, load(go + j) * gelu_derivative(x[j]));
      }
    }
  }
  if (partials) partials->add_into(grad_bias, cols);
}

}  // namespace

void CpuBackend::gelu_forward(const Tensor& in, const Tensor& out) {
  VP_REQUIRE(in.numel() == out.numel() && in.dtype() == DType::f32, "gelu_forward: shapes/dtypes");
  if (out.dtype() == DType::f32) {
    gelu_rows(in.f32(), out.f32(), in.numel());
  } else {
    gelu_rows(in.f32(), out.u16(), in.numel());
  }
}

void CpuBackend::gelu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                               const Tensor* grad_bias) {
  VP_REQUIRE(grad_out.numel() == in.numel() && grad_in.numel() == in.numel() && in.dtype() == DType::f32,
             "gelu_backward: shapes/dtypes");
  const int64_t cols = in.dim(-1);
  const int64_t rows = in.numel() / cols;
  ThreadPartials* partials = grad_bias ? &partials_ : nullptr;
  float* bias = grad_bias ? grad_bias->f32() : nullptr;
  if (grad_bias) VP_REQUIRE(grad_bias->numel() == cols, "gelu_backward: bias gradient must have ", cols, " entries");
  const bool go32 = grad_out.dtype() == DType::f32, gi32 = grad_in.dtype() == DType::f32;
  if (go32 && gi32) {
    gelu_backward_rows(grad_out.f32(), in.f32(), grad_in.f32(), rows, cols, partials, bias);
  } else if (go32) {
    gelu_backward_rows(grad_out.f32(), in.f32(), grad_in.u16(), rows, cols, partials, bias);
  } else if (gi32) {
    gelu_backward_rows(grad_out.u16(), in.f32(), grad_in.f32(), rows, cols, partials, bias);
  } else {
    gelu_backward_rows(grad_out.u16(), in.f32(), grad_in.u16(), rows, cols, partials, bias);
  }
}

}  // namespace vitpipe::cpu
