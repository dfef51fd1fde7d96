// The cuBLASLt calls of the Backend's LoRA ops (peft's Linear beside a frozen layer), built with row_major_gemm.h.
// The adapted output may be a column block of the fused q|k|v tensor: its GEMM writes through the block's pointer
// (column c0) with the wide tensor's row stride as leading dimension. Gradients ADD (beta = 1), as vitpipe's
// parameter gradients and LoRA's input-gradient contribution do.
//   forward   low = scale in a^T;            out[:, c0:c0+N] += low b^T
//   backward  grad_b += g^T low;   t = scale g b;   grad_a += t^T in;   grad_in += t a     (g = grad_out[:, c0:c0+N])
#pragma once

#include <vector>

#include "backend/cuda/calls/gemm_call.h"
#include "backend/cuda/calls/row_major_matrix.h"

namespace vitpipe::cuda {

// in [M, K], a [r, K], b [N, r], low [M, r] (the GEMM dtype); out [M, ld] with the block at `column`.
std::vector<GemmCall> lora_forward_gemms(const RowMajorMatrix& in, const RowMajorMatrix& a, const RowMajorMatrix& b,
                                         float scale, const RowMajorMatrix& low, const RowMajorMatrix& out,
                                         int64_t column);

// grad_out [M, ld] with g at `column`; `t` [M, r] is scratch of the GEMM dtype; grad_in / grad_a / grad_b may be
// null (not wanted). In order: grad_b, t, grad_a, grad_in.
std::vector<GemmCall> lora_backward_gemms(const RowMajorMatrix& grad_out, int64_t column, const RowMajorMatrix& in,
                                          const RowMajorMatrix& a, const RowMajorMatrix& b, float scale,
                                          const RowMajorMatrix& low, const RowMajorMatrix& t,
                                          const RowMajorMatrix* grad_in, const RowMajorMatrix* grad_a,
                                          const RowMajorMatrix* grad_b);

}  // namespace vitpipe::cuda
