// Linear layers on oneDNN matmul. Weights are [out, in] (torch.nn.Linear); oneDNN sees them through strides, and
// from kPackWeightMinRows rows the forward and input-gradient GEMMs read a copy in oneDNN's blocked layout, made per
// call (a weight is small beside the rows). Memory: forward reads in + weight, writes out once (bias and the
// residual add are fused as oneDNN post-ops); the weight gradient accumulates in place with a sum post-op.
#include "backend/cpu/kernels/cpu_backend.h"
#include "backend/cpu/kernels/vector_math.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {
namespace {

// Measured on 2 Zen 5 cores, bf16 training at batch 32: ViT-Tiny's weight gradients (at most 147,456 outputs) 8-10%
// faster split; ViT-Base's (589,824 and 2,359,296) 25% slower, the whole step.
constexpr int64_t kSplitReductionMaxOutputs = int64_t{1} << 18;

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
  s.pack_b = m >= kPackWeightMinRows;
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
  s.pack_b = m >= kPackWeightMinRows;
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
  const int threads = omp_get_max_threads();
  if (n * k <= kSplitReductionMaxOutputs && threads > 1 && m >= 64 * threads) {
    // A small gradient over many rows (ViT-Tiny: 192 x 768 over 6,304 tokens): oneDNN parallelises over the output,
    // which leaves the threads little to share; instead the rows are split, each thread runs its own
    // single-threaded GEMM into a private partial, and the partials are summed into the gradient in a fixed order.
    const int64_t rows = m / threads;
    const int64_t last_rows = m - rows * (threads - 1);
    MatmulShape part = s;
    part.k = rows;
    const MatmulCache::Prepared& body = matmuls_.prepare(part);
    part.k = last_rows;
    const MatmulCache::Prepared& tail = matmuls_.prepare(part);
    const int64_t size = n * k;
    if (weight_partials_.size() < static_cast<size_t>(size * threads)) {
      weight_partials_.resize(static_cast<size_t>(size * threads));
    }
    float* partials = weight_partials_.data();
    const size_t es = dtype_size(in.dtype());
    const char* g = static_cast<const char*>(grad_out.raw());
    const char* x = static_cast<const char*>(in.raw());
    float* out = grad_weight.f32();
    // Chunks by `omp for`, not by thread number: a team smaller than asked still computes every partial.
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
      for (int t = 0; t < threads; ++t) {
        const int64_t first = rows * t;
        matmuls_.run_prepared(t == threads - 1 ? tail : body, g + static_cast<size_t>(first * n) * es,
                              x + static_cast<size_t>(first * k) * es, partials + t * size);
      }
#pragma omp for schedule(static)
      for (int64_t i = 0; i < size; ++i) {
        float sum = out[i];
        for (int u = 0; u < threads; ++u) sum += partials[u * size + i];
        out[i] = sum;
      }
    }
    return;
  }
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
