// The cuBLASLt calls of the Backend's linear layers, built from its row-major tensors. cuBLASLt is column-major, and
// a row-major [r, c] matrix with row stride c is the column-major [c, r] matrix with leading dimension c (its
// transpose), so each row-major product Y = X W^T is issued as the column-major Y^T = W X^T:
//   linear_forward         out[M,N] = in[M,K] W[N,K]^T (+ bias) (+ residual): T/N, m=N n=M k=K, A=W, B=in
//   linear_backward_input  grad_in[M,K] = grad_out[M,N] W[N,K]:               N/N, m=K n=M k=N, A=W, B=grad_out
//   linear_backward_weight grad_W[N,K] += grad_out^T in:                      N/T, m=K n=N k=M, A=in, B=grad_out,
//                          beta = 1 with C = D = grad_W (parameter gradients ADD).
// The bias gradient of the last one can come from the same GEMM (_BGRADB: the column sums of grad_out over M), but
// that epilogue OVERWRITES its output where vitpipe's parameter gradients add: it goes into a scratch vector that a
// VectorAdd then adds into the gradient.
#pragma once

#include <optional>

#include "backend/cuda/calls/gemm_call.h"
#include "backend/cuda/calls/row_major_matrix.h"

namespace vitpipe::cuda {

// sum[i] += addend[i] for i < count, f32: vitpipe's own kernel, not a library call.
struct VectorAdd {
  const float* addend = nullptr;
  float* sum = nullptr;
  int64_t count = 0;
};

// A bias vector [N] for the _BIAS epilogue (no bias: null data).
struct BiasVector {
  const void* data = nullptr;
  ElementType type = ElementType::f32;
};

// Backend::linear_forward. `bias` rides the _BIAS epilogue; cublasLt.h documents its elements as of D's type
// (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE; the exceptions are int8 and fp8 kernels), so a bf16 `out` takes a bf16 copy
// of the Backend's f32 bias (rounded before the add, not after: within bf16's tolerance, not the CPU's bits).
// `residual` [M, N] (or null) is C with beta = 1 and may be `out` itself; cuBLASLt wants C and D of one type, so a
// residual needs an f32 `out`. Throws std::invalid_argument on shapes or types that do not fit, and in every
// builder here on a matrix whose rows are not padded to 16 bytes (padded_rows.h).
GemmCall linear_forward_gemm(const RowMajorMatrix& in, const RowMajorMatrix& weight, const BiasVector& bias,
                             const RowMajorMatrix* residual, const RowMajorMatrix& out, bool allow_tf32 = false);

// Backend::linear_backward_input (overwrites grad_in: beta = 0).
GemmCall linear_backward_input_gemm(const RowMajorMatrix& grad_out, const RowMajorMatrix& weight,
                                    const RowMajorMatrix& grad_in, bool allow_tf32 = false);

struct LinearWeightGradientCalls {
  GemmCall gemm;                      // grad_weight += grad_out^T in (and bias_scratch = column sums of grad_out)
  std::optional<VectorAdd> bias_add;  // grad_bias += bias_scratch, after the GEMM
};

// Backend::linear_backward_weight, and with `grad_bias` (else null) Backend::bias_backward of the same grad_out
// through the _BGRADB epilogue into `bias_scratch` ([N] f32, not grad_bias).
LinearWeightGradientCalls linear_backward_weight_gemm(const RowMajorMatrix& grad_out, const RowMajorMatrix& in,
                                                      const RowMajorMatrix& grad_weight, float* grad_bias,
                                                      float* bias_scratch, bool allow_tf32 = false);

}  // namespace vitpipe::cuda
