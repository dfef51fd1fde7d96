// Exact (erf) GELU. Forward reads the pre-activation once and writes the activation (f32 or bf16: it only feeds
// the next GEMM). Backward fuses the fc1 bias gradient (column sums, fp32) into the same pass. In bf16 training the
// pre-activation is kept in bf16 too (as autocast does): half the memory traffic of the largest activation. bf16
// inputs are looked up in tables (gelu_rows.h).
#include <type_traits>

#include "backend/cpu/kernels/cpu_backend.h"
#include "backend/cpu/kernels/vector_math.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

// After the target pragma, so that its loops are compiled for this level too.
#include "backend/cpu/kernels/gelu_rows.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {
namespace {

template <class In, class Out>
void gelu_rows(const In* in, Out* out, int64_t n) {
  const float* table = gelu_table_for<In>();
#pragma omp parallel for simd schedule(static) if (parallel_worth_it(n))
  for (int64_t i = 0; i < n; ++i) store(out + i, gelu_of(in[i], table));
}

template <class GradOut, class In, class GradIn>
void gelu_backward_rows(const GradOut* grad_out, const In* in, GradIn* grad_in, int64_t rows, int64_t cols,
                        ThreadPartials* partials, float* grad_bias) {
  if (partials) partials->reset(omp_get_max_threads(), cols);
  const float* table = gelu_derivative_table_for<In>();
#pragma omp parallel if (parallel_worth_it(rows * cols))
  {
    float* cs = partials ? partials->row(omp_get_thread_num()) : nullptr;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      gelu_backward_row(grad_out + i * cols, in + i * cols, grad_in + i * cols, cols, table, cs);
    }
  }
  if (partials) partials->add_into(grad_bias, cols);
}

}  // namespace

void CpuBackend::gelu_forward(const Tensor& in, const Tensor& out) {
  VP_REQUIRE(in.numel() == out.numel(), "gelu_forward: shapes differ");
  const bool in32 = in.dtype() == DType::f32, out32 = out.dtype() == DType::f32;
  if (in32 && out32) {
    gelu_rows(in.f32(), out.f32(), in.numel());
  } else if (in32) {
    gelu_rows(in.f32(), out.u16(), in.numel());
  } else {
    VP_REQUIRE(!out32, "gelu_forward: a bf16 input needs a bf16 output");
    gelu_rows(in.u16(), out.u16(), in.numel());
  }
}

void CpuBackend::gelu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                               const Tensor* grad_bias) {
  VP_REQUIRE(grad_out.numel() == in.numel() && grad_in.numel() == in.numel(), "gelu_backward: shapes differ");
  const int64_t cols = in.dim(-1);
  const int64_t rows = in.numel() / cols;
  ThreadPartials* partials = grad_bias ? &partials_ : nullptr;
  float* bias = grad_bias ? grad_bias->f32() : nullptr;
  if (grad_bias) VP_REQUIRE(grad_bias->numel() == cols, "gelu_backward: bias gradient must have ", cols, " entries");
  const bool go32 = grad_out.dtype() == DType::f32, in32 = in.dtype() == DType::f32;
  const bool gi32 = grad_in.dtype() == DType::f32;
  if (go32 && in32 && gi32) {
    gelu_backward_rows(grad_out.f32(), in.f32(), grad_in.f32(), rows, cols, partials, bias);
  } else if (!go32 && !in32 && !gi32) {
    gelu_backward_rows(grad_out.u16(), in.u16(), grad_in.u16(), rows, cols, partials, bias);
  } else if (!go32 && in32 && !gi32) {
    gelu_backward_rows(grad_out.u16(), in.f32(), grad_in.u16(), rows, cols, partials, bias);
  } else {
    fail("gelu_backward: expected all-f32 or all-bf16 tensors (or a bf16 gradient with an f32 input)");
  }
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
