// Linear layers on oneDNN matmul. Weights are [out, in] (torch.nn.Linear); oneDNN sees them through strides, so
// no transposed copy is ever made. Memory: forward reads in + weight, writes out once (bias and the residual add
// are fused as oneDNN post-ops); the weight gradient accumulates in place with a sum post-op.
#include "backend/cpu/kernels/cpu_backend.h"
#include "backend/cpu/kernels/vector_math.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {
namespace {

void require_2d(const Tensor& t, const char* what) {
  VP_REQUIRE(t.rank() == 2, "linear: ", what, " must be 2-D, got ", shape_string(t.shape()));
}

}  // namespace

void CpuBackend::linear_forward(const Tensor& in, const Tensor& weight, const Tensor* bias, const Tensor* residual,
                                const Tensor& out) {
  require_2d(in, "input");
  require_2d(weight, "weight");
  const int64_t m = in.dim(0), k = in.dim(1), n = weight.dim(0);
  VP_REQUIRE(weight.dim(1) == k && out.numel() == m * n && in.dtype() == weight.dtype(), "linear_forward: shapes ",
             shape_string(in.shape()), " x ", shape_string(weight.shape()), "^T -> ", shape_string(out.shape()));
  MatmulShape s;
  s.m = m, s.n = n, s.k = k;
  s.a_row = k, s.a_col = 1;
  s.b_row = 1, s.b_col = k;  // B[k][n] = weight[n][k]
  s.c_row = n;
  s.a_type = in.dtype(), s.b_type = weight.dtype(), s.c_type = out.dtype();
  s.bias = bias != nullptr;
  s.residual = residual != nullptr;
  if (bias) VP_REQUIRE(bias->numel() == n && bias->dtype() == DType::f32, "linear_forward: bias must be [", n, "] f32");
  if (residual) {
    VP_REQUIRE(residual->numel() == m * n && residual->dtype() == DType::f32, "linear_forward: residual must be [", m,
               ", ", n, "] f32");
    // oneDNN's binary post-op reads the residual while the kernel writes out: aliased, some levels' kernels
    // (avx2, avx512) read rows they already wrote.
    VP_REQUIRE(residual->raw() != out.raw(), "linear_forward: the residual must not be the output (in place)");
  }
  matmuls_.run(s, in.raw(), weight.raw(), out.raw(), bias ? bias->f32() : nullptr,
               residual ? residual->f32() : nullptr);
}

void CpuBackend::linear_gelu_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  require_2d(in, "input");
  require_2d(weight, "weight");
  const int64_t m = in.dim(0), k = in.dim(1), n = weight.dim(0);
  VP_REQUIRE(weight.dim(1) == k && out.numel() == m * n && in.dtype() == weight.dtype(), "linear_gelu_forward: shapes ",
             shape_string(in.shape()), " x ", shape_string(weight.shape()), "^T -> ", shape_string(out.shape()));
  VP_REQUIRE(bias.numel() == n && bias.dtype() == DType::f32, "linear_gelu_forward: bias must be [", n, "] f32");
  MatmulShape s;
  s.m = m, s.n = n, s.k = k;
  s.a_row = k, s.a_col = 1;
  s.b_row = 1, s.b_col = k;
  s.c_row = n;
  s.a_type = in.dtype(), s.b_type = weight.dtype(), s.c_type = out.dtype();
  s.bias = true;
  s.gelu = true;
  matmuls_.run(s, in.raw(), weight.raw(), out.raw(), bias.f32());
}

void CpuBackend::linear_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_in) {
  require_2d(weight, "weight");
  const int64_t n = weight.dim(0), k = weight.dim(1);
  const int64_t m = grad_out.numel() / n;
  VP_REQUIRE(grad_out.numel() == m * n && grad_in.numel() == m * k && grad_out.dtype() == weight.dtype(),
             "linear_backward_input: shapes ", shape_string(grad_out.shape()), " x ", shape_string(weight.shape()),
             " -> ", shape_string(grad_in.shape()));
  MatmulShape s;
  s.m = m, s.n = k, s.k = n;
  s.a_row = n, s.a_col = 1;
  s.b_row = k, s.b_col = 1;
  s.c_row = k;
  s.a_type = grad_out.dtype(), s.b_type = weight.dtype(), s.c_type = grad_in.dtype();
  matmuls_.run(s, grad_out.raw(), weight.raw(), grad_in.raw());
}

void CpuBackend::linear_backward_weight(const Tensor& grad_out, const Tensor& in, const Tensor& grad_weight) {
  require_2d(grad_weight, "weight gradient");
  const int64_t n = grad_weight.dim(0), k = grad_weight.dim(1);
  const int64_t m = in.numel() / k;
  VP_REQUIRE(in.numel() == m * k && grad_out.numel() == m * n && grad_out.dtype() == in.dtype() &&
                 grad_weight.dtype() == DType::f32,
             "linear_backward_weight: shapes ", shape_string(grad_out.shape()), "^T x ", shape_string(in.shape()),
             " -> ", shape_string(grad_weight.shape()));
  MatmulShape s;
  s.m = n, s.n = k, s.k = m;
  s.a_row = 1, s.a_col = n;  // A[i][j] = grad_out[j][i]
  s.b_row = k, s.b_col = 1;
  s.c_row = k;
  s.a_type = grad_out.dtype(), s.b_type = in.dtype(), s.c_type = DType::f32;
  s.accumulate = true;
  matmuls_.run(s, grad_out.raw(), in.raw(), grad_weight.raw());
}

namespace {

template <class T>
void column_sums(const T* grad, int64_t m, int64_t n, ThreadPartials& partials, float* out) {
  partials.reset(omp_get_max_threads(), n);
#pragma omp parallel if (parallel_worth_it(m * n))
  {
    float* acc = partials.row(omp_get_thread_num());
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      const T* row = grad + i * n;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) acc[j] += load(row + j);
    }
  }
  partials.add_into(out, n);
}

}  // namespace

void CpuBackend::bias_backward(const Tensor& grad, const Tensor& grad_bias) {
  const int64_t n = grad_bias.numel();
  const int64_t m = grad.numel() / n;
  VP_REQUIRE(grad.numel() == m * n, "bias_backward: ", shape_string(grad.shape()), " vs bias [", n, "]");
  if (grad.dtype() == DType::f32) {
    column_sums(grad.f32(), m, n, partials_, grad_bias.f32());
  } else {
    column_sums(grad.u16(), m, n, partials_, grad_bias.f32());
  }
}

void CpuBackend::convert(const Tensor& src, const Tensor& dst) {
  VP_REQUIRE(src.numel() == dst.numel(), "convert: element counts differ");
  const size_t n = static_cast<size_t>(src.numel());
  if (src.dtype() == dst.dtype()) {
    dst.copy_from(src);
  } else if (src.dtype() == DType::f32 && dst.dtype() == DType::bf16) {
    convert_f32_to_bf16(src.f32(), dst.u16(), n);
  } else if (src.dtype() == DType::bf16 && dst.dtype() == DType::f32) {
    convert_bf16_to_f32(src.u16(), dst.f32(), n);
  } else {
    fail("convert: ", dtype_name(src.dtype()), " -> ", dtype_name(dst.dtype()), " is not supported");
  }
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
