// The rules a cublasLtMatmul call must meet, checked on the description: the layouts agree with m, n, k and the
// transposes; every leading dimension covers its matrix's rows (else CUBLAS_STATUS_INVALID_VALUE); the type
// combination is one cuBLASLt runs with CUBLAS_COMPUTE_32F (A and B alike; C and D alike; bf16 operands with bf16 or
// f32 results, f32 operands with f32 results); C = D in place only with one layout; the epilogue has its vector, of
// D's type (as cublasLt.h documents CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE outside int8 and fp8 kernels); and
// the alignment the tensor-core kernels need: 16-byte pointers and leading dimensions whose byte size is a multiple
// of 16 (8 elements of bf16, 4 of f32).
#pragma once

#include <string>
#include <vector>

#include "backend/cuda/calls/gemm_call.h"

namespace vitpipe::cuda {

constexpr int64_t kLibraryAlignmentBytes = 16;

// Every rule the call breaks, one sentence each; empty when it meets them all.
std::vector<std::string> gemm_rule_violations(const GemmCall& call);

}  // namespace vitpipe::cuda
