// One cublasLtMatmul as data: D = alpha * op(A) op(B) + beta * C, then the epilogue, with every matrix in cuBLASLt's
// COLUMN-MAJOR convention (cublasLtMatrixLayout: rows, cols, leading dimension, batch count and stride). A pure
// function builds it from the Backend's row-major tensors (linear_gemm_calls.h); the CUDA module turns it into real
// calls (gemm_executor.cpp) and the CPU test suite executes it with the documented semantics
// (gemm_interpreter.h), so the layout arithmetic is checked on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/calls/element_type.h"

namespace vitpipe::cuda {

enum class Transpose : uint8_t { none, transpose };  // CUBLAS_OP_N, CUBLAS_OP_T

// CUBLASLT_EPILOGUE_DEFAULT; _BIAS: D(i, j) += bias[i] (bias of length m, after alpha/beta); _BGRADB: bias[j] =
// sum over the k dimension of op(B)(p, j) (length n), OVERWRITTEN, never accumulated.
enum class GemmEpilogue : uint8_t { none, bias, bias_gradient_b };

// cublasLtMatrixLayout_t: `rows` x `cols` column-major, column j starting `ld` elements after column j - 1.
struct MatrixLayout {
  ElementType type = ElementType::f32;
  int64_t rows = 0, cols = 0, ld = 0;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;  // elements between batches
  bool operator==(const MatrixLayout&) const = default;
};

// Everything of a call but its pointers: the key of a cached plan (matmul descriptor, layouts, chosen algorithm).
struct GemmShape {
  Transpose trans_a = Transpose::none, trans_b = Transpose::none;
  int64_t m = 0, n = 0, k = 0;
  MatrixLayout a, b, c, d;          // a: op(A) is m x k; b: op(B) is k x n; c, d: m x n
  bool allow_tf32 = false;          // CUBLAS_COMPUTE_32F_FAST_TF32 instead of CUBLAS_COMPUTE_32F (fp32 operands only)
  float alpha = 1.0f, beta = 0.0f;  // beta = 1 with C = D: accumulate into D (parameter gradients add)
  GemmEpilogue epilogue = GemmEpilogue::none;
  ElementType bias_type = ElementType::f32;  // CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: D's type (gemm_rules.h)
  bool operator==(const GemmShape&) const = default;
};

struct GemmPointers {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;  // not read when beta == 0
  void* d = nullptr;
  void* bias = nullptr;  // CUBLASLT_MATMUL_DESC_BIAS_POINTER: read by _BIAS, written by _BGRADB
};

struct GemmCall {
  const char* what = "";  // the Backend op it implements, for messages
  GemmShape shape;
  GemmPointers data;
};

// A hash of every field of the shape (the plan cache's key).
size_t gemm_shape_hash(const GemmShape& shape);
// "linear_forward: T/N m=768 n=394 k=192 A f32 [192 x 768, ld 192] ..." for messages and logs.
std::string describe(const GemmCall& call);

}  // namespace vitpipe::cuda
