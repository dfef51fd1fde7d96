// Any row-major product as one cuBLASLt call: C[M, N] = alpha op(X) op(Y) + beta C, where op(X) is [M, K] (X stored
// [M, K], or [K, M] and transposed) and op(Y) is [K, N] (Y stored [K, N], or [N, K] and transposed). Issued as the
// column-major C^T = op(Y)^T op(X)^T: A = Y, B = X, m = N, n = M, each row-major matrix read as the column-major
// transpose it already is (leading dimension = its row stride), so a plain operand is CUBLAS_OP_N and a transposed
// one CUBLAS_OP_T. The linear layers' builders are spelled out in linear_gemm_calls.cpp; LoRA's thin products use
// this one.
#pragma once

#include "backend/cuda/calls/gemm_call.h"
#include "backend/cuda/calls/row_major_matrix.h"

namespace vitpipe::cuda {

struct RowMajorOperand {
  RowMajorMatrix matrix;
  bool transposed = false;  // op(M) = M^T
};

// beta != 0 reads C from `out` itself (in place: the product adds). Throws std::invalid_argument when the shapes do
// not fit or a matrix's rows are not padded to 16 bytes (padded_rows.h).
GemmCall row_major_gemm(const char* what, const RowMajorOperand& x, const RowMajorOperand& y, const RowMajorMatrix& out,
                        float alpha, float beta);

}  // namespace vitpipe::cuda
