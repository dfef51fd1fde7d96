// LoRA (peft's Linear): y += scale * (x A^T) B^T beside a frozen linear layer. Rank r is small (4..64), so the two
// extra GEMMs are thin: [M, K] x [K, r] and [M, r] x [r, N]. The output may be a column block of a wider tensor (the
// fused q|k|v projection): oneDNN reads and writes it through its row stride. Results go straight into fp32
// outputs (sum post-op); a bf16 output gets the fp32 delta added and rounded once. Scratch is per thread.
#include <algorithm>
#include <vector>

#include "backend/cpu/kernels/cpu_backend.h"
#include "backend/cpu/kernels/vector_math.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {
namespace {

// C[M, N] (row stride c_row) (+)= A . B^T-as-stored, with A [M, K] row-major (stride a_row) and W [N, K] row-major.
MatmulShape times_transposed(int64_t m, int64_t n, int64_t k, int64_t a_row, int64_t c_row, DType a, DType w, DType c,
                             bool accumulate) {
  MatmulShape s;
  s.m = m, s.n = n, s.k = k;
  s.a_row = a_row, s.a_col = 1;
  s.b_row = 1, s.b_col = k;  // B[k][n] = W[n][k]
  s.c_row = c_row;
  s.a_type = a, s.b_type = w, s.c_type = c;
  s.accumulate = accumulate;
  return s;
}

template <class T>
void add_rounded(const float* delta, int64_t rows, int64_t cols, T* out, int64_t out_row) {
#pragma omp parallel for schedule(static) if (parallel_worth_it(rows * cols))
  for (int64_t i = 0; i < rows; ++i) {
    T* o = out + i * out_row;
    const float* d = delta + i * cols;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) store(o + j, load(o + j) + d[j]);
  }
}

template <class T>
void scaled_copy(const float* src, int64_t n, float factor, T* dst) {
#pragma omp parallel for simd schedule(static) if (parallel_worth_it(n))
  for (int64_t i = 0; i < n; ++i) store(dst + i, factor * src[i]);
}

// Adds an fp32 product into `out` (f32: the GEMM accumulates; bf16: through scratch, rounded once).
void accumulate_into(MatmulCache& matmuls, MatmulShape s, const void* a, const void* b, const Tensor& out,
                     int64_t column, int64_t ld, std::vector<float>& scratch) {
  if (out.dtype() == DType::f32) {
    s.c_row = ld, s.c_type = DType::f32, s.accumulate = true;
    matmuls.run(s, a, b, out.f32() + column);
    return;
  }
  scratch.resize(static_cast<size_t>(s.m * s.n));
  s.c_row = s.n, s.c_type = DType::f32, s.accumulate = false;
  matmuls.run(s, a, b, scratch.data());
  add_rounded(scratch.data(), s.m, s.n, out.u16() + column, ld);
}

}  // namespace

void CpuBackend::lora_forward(const Tensor& in, const Tensor& a, const Tensor& b, double scale, const Tensor& low,
                              const Tensor& out, int64_t column) {
  VP_REQUIRE(in.rank() == 2 && a.rank() == 2 && b.rank() == 2, "lora_forward: 2-D tensors expected");
  const int64_t m = in.dim(0), k = in.dim(1), r = a.dim(0), n = b.dim(0);
  const int64_t ld = out.numel() / std::max<int64_t>(m, 1);
  VP_REQUIRE(a.dim(1) == k && b.dim(1) == r && low.numel() == m * r && out.numel() == m * ld && column >= 0 &&
                 column + n <= ld && in.dtype() == a.dtype() && a.dtype() == b.dtype() && low.dtype() == in.dtype(),
             "lora_forward: shapes ", shape_string(in.shape()), " x ", shape_string(a.shape()), "^T x ",
             shape_string(b.shape()), "^T -> ", shape_string(out.shape()), " at column ", column);
  thread_local std::vector<float> product, delta;
  product.resize(static_cast<size_t>(m * r));
  matmuls_.run(times_transposed(m, r, k, k, r, in.dtype(), a.dtype(), DType::f32, false), in.raw(), a.raw(),
               product.data());
  if (low.dtype() == DType::f32) {
    scaled_copy(product.data(), m * r, static_cast<float>(scale), low.f32());
  } else {
    scaled_copy(product.data(), m * r, static_cast<float>(scale), low.u16());
  }
  accumulate_into(matmuls_, times_transposed(m, n, r, r, n, low.dtype(), b.dtype(), DType::f32, false), low.raw(),
                  b.raw(), out, column, ld, delta);
}

void CpuBackend::lora_backward(const Tensor& grad_out, int64_t column, const Tensor& in, const Tensor& a,
                               const Tensor& b, double scale, const Tensor& low, const Tensor* grad_in,
                               const Tensor* grad_a, const Tensor* grad_b) {
  const int64_t m = in.dim(0), k = in.dim(1), r = a.dim(0), n = b.dim(0);
  const int64_t ld = grad_out.numel() / std::max<int64_t>(m, 1);
  VP_REQUIRE(grad_out.numel() == m * ld && column >= 0 && column + n <= ld && low.numel() == m * r &&
                 grad_out.dtype() == b.dtype() && low.dtype() == in.dtype() && a.dtype() == in.dtype(),
             "lora_backward: shapes ", shape_string(grad_out.shape()), " at column ", column, ", ",
             shape_string(in.shape()), ", ", shape_string(a.shape()), ", ", shape_string(b.shape()));
  const size_t width = dtype_size(grad_out.dtype());
  const char* g = static_cast<const char*>(grad_out.raw()) + static_cast<size_t>(column) * width;
  if (grad_b) {  // grad_b[N, r] += g^T . low
    VP_REQUIRE(grad_b->numel() == n * r && grad_b->dtype() == DType::f32, "lora_backward: grad_b must be [", n, ", ", r,
               "] f32");
    MatmulShape s;
    s.m = n, s.n = r, s.k = m;
    s.a_row = 1, s.a_col = ld;  // A[i][p] = g[p][i]
    s.b_row = r, s.b_col = 1;
    s.c_row = r;
    s.a_type = grad_out.dtype(), s.b_type = low.dtype(), s.c_type = DType::f32;
    s.accumulate = true;
    matmuls_.run(s, g, low.raw(), grad_b->f32());
  }
  if (!grad_a && !grad_in) return;
  // t = scale * g . b  [M, r], in the GEMM dtype for the two products that read it.
  thread_local std::vector<float> product, delta;
  thread_local Tensor t_low;
  product.resize(static_cast<size_t>(m * r));
  {
    MatmulShape s;
    s.m = m, s.n = r, s.k = n;
    s.a_row = ld, s.a_col = 1;
    s.b_row = r, s.b_col = 1;  // B[p][j] = b[p][j]
    s.c_row = r;
    s.a_type = grad_out.dtype(), s.b_type = b.dtype(), s.c_type = DType::f32;
    matmuls_.run(s, g, b.raw(), product.data());
  }
  if (t_low.numel() < m * r || t_low.dtype() != in.dtype()) t_low = Tensor::empty({m * r}, in.dtype());
  if (in.dtype() == DType::f32) {
    scaled_copy(product.data(), m * r, static_cast<float>(scale), t_low.f32());
  } else {
    scaled_copy(product.data(), m * r, static_cast<float>(scale), t_low.u16());
  }
  if (grad_a) {  // grad_a[r, K] += t^T . in
    VP_REQUIRE(grad_a->numel() == r * k && grad_a->dtype() == DType::f32, "lora_backward: grad_a must be [", r, ", ", k,
               "] f32");
    MatmulShape s;
    s.m = r, s.n = k, s.k = m;
    s.a_row = 1, s.a_col = r;  // A[i][p] = t[p][i]
    s.b_row = k, s.b_col = 1;
    s.c_row = k;
    s.a_type = in.dtype(), s.b_type = in.dtype(), s.c_type = DType::f32;
    s.accumulate = true;
    matmuls_.run(s, t_low.raw(), in.raw(), grad_a->f32());
  }
  if (grad_in) {  // grad_in[M, K] += t . a
    VP_REQUIRE(grad_in->numel() == m * k, "lora_backward: grad_in must be [", m, ", ", k, "]");
    MatmulShape s;
    s.m = m, s.n = k, s.k = r;
    s.a_row = r, s.a_col = 1;
    s.b_row = k, s.b_col = 1;  // B[p][j] = a[p][j]
    s.a_type = in.dtype(), s.b_type = a.dtype();
    accumulate_into(matmuls_, s, t_low.raw(), a.raw(), *grad_in, 0, k, delta);
  }
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
