// bf16 GEMMs where oneDNN has no bf16 kernel (a CPU, or an ONEDNN_MAX_CPU_ISA cap, below AVX-512): the bf16
// operands are widened into dense fp32 copies and an fp32 GEMM runs on them; a bf16 result is narrowed back (round
// to nearest even). Widening is exact and a product of two bf16 values is exact in fp32, so this computes what a
// bf16 GEMM with fp32 accumulation does, up to summation order; it is no faster than fp32.
#pragma once

#include <cstdint>

#include "backend/cpu/onednn_matmul.h"

namespace vitpipe::cpu {

// An operand as MatmulShape describes it: element (i, j) at i * row_stride + j * col_stride.
struct StridedView {
  int64_t rows = 0, cols = 0, row_stride = 0, col_stride = 1;
};

struct Bf16Widening {
  bool a = false, b = false, c = false;  // which operands go through fp32 copies
  StridedView a_view, b_view;            // where A and B are read from
  MatmulShape f32_shape;                 // what the fp32 primitive computes
  int64_t c_row = 0;                     // the bf16 result's row stride
  int64_t a_elements() const { return a ? a_view.rows * a_view.cols : 0; }
  int64_t b_elements() const { return b ? b_view.rows * b_view.cols : 0; }
  int64_t c_elements() const { return c ? f32_shape.m * f32_shape.n : 0; }
};

Bf16Widening plan_bf16_widening(const MatmulShape& shape);

// Dense fp32 copy of a bf16 view, keeping its contiguous direction contiguous (the layout plan_bf16_widening
// gave the fp32 shape). `parallel`: use the calling thread's OpenMP team.
void widen_bf16(const uint16_t* src, const StridedView& view, float* dst, bool parallel);
// dst (rows of `dst_row_stride` bf16) = round(src), src dense [rows, cols] fp32.
void narrow_to_bf16(const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t dst_row_stride, bool parallel);

}  // namespace vitpipe::cpu
