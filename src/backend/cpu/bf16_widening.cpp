#include "backend/cpu/bf16_widening.h"

#include "backend/cpu/thread_partials.h"
#include "tensor/dtype.h"
#include "util/error.h"

namespace vitpipe::cpu {
namespace {

// The fp32 copy's strides: the view's unit-stride direction stays unit-stride, so the GEMM reads it the same way.
void dense_strides(const StridedView& v, int64_t* row_stride, int64_t* col_stride) {
  if (v.col_stride != 1 && v.row_stride == 1) {
    *row_stride = 1, *col_stride = v.rows;
  } else {
    *row_stride = v.cols, *col_stride = 1;
  }
}

}  // namespace

Bf16Widening plan_bf16_widening(const MatmulShape& s) {
  Bf16Widening w;
  w.f32_shape = s;
  w.c_row = s.c_row;
  if (s.a_type == DType::bf16) {
    w.a = true;
    w.a_view = {s.m, s.k, s.a_row, s.a_col};
    dense_strides(w.a_view, &w.f32_shape.a_row, &w.f32_shape.a_col);
    w.f32_shape.a_type = DType::f32;
  }
  if (s.b_type == DType::bf16) {
    w.b = true;
    w.b_view = {s.k, s.n, s.b_row, s.b_col};
    dense_strides(w.b_view, &w.f32_shape.b_row, &w.f32_shape.b_col);
    w.f32_shape.b_type = DType::f32;
  }
  if (s.c_type == DType::bf16) {
    VP_REQUIRE(!s.accumulate, "matmul: accumulating into a bf16 result is not supported");
    w.c = true;
    w.f32_shape.c_row = s.n;
    w.f32_shape.c_type = DType::f32;
  }
  return w;
}

void widen_bf16(const uint16_t* src, const StridedView& v, float* dst, bool parallel) {
  const bool by_columns = v.col_stride != 1 && v.row_stride == 1;
  const int64_t outer = by_columns ? v.cols : v.rows, inner = by_columns ? v.rows : v.cols;
  const int64_t outer_stride = by_columns ? v.col_stride : v.row_stride;
  const int64_t inner_stride = by_columns ? 1 : v.col_stride;
#pragma omp parallel for schedule(static) if (parallel && parallel_worth_it(outer * inner))
  for (int64_t o = 0; o < outer; ++o) {
    const uint16_t* s = src + o * outer_stride;
    float* d = dst + o * inner;
    if (inner_stride == 1) {
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) d[i] = bf16_to_float(s[i]);
    } else {
      for (int64_t i = 0; i < inner; ++i) d[i] = bf16_to_float(s[i * inner_stride]);
    }
  }
}

void narrow_to_bf16(const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t dst_row_stride,
                    bool parallel) {
#pragma omp parallel for schedule(static) if (parallel && parallel_worth_it(rows * cols))
  for (int64_t i = 0; i < rows; ++i) {
    const float* s = src + i * cols;
    uint16_t* d = dst + i * dst_row_stride;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) d[j] = float_to_bf16(s[j]);
  }
}

}  // namespace vitpipe::cpu
