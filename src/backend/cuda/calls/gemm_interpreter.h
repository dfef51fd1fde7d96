// A CPU interpreter of GemmCall: executes the description on host memory with cuBLASLt's documented semantics, so
// that tests can hold each description to the Backend contract (tests/cuda/test_gemm_calls.cpp).
#pragma once

#include "backend/cuda/calls/gemm_call.h"
#include "backend/cuda/calls/linear_gemm_calls.h"

namespace vitpipe::cuda {

// Column-major matrices; op(X) per transpose; D = alpha * op(A) op(B) + beta * C with C not read when beta is 0
// (cuBLAS: "C need not be valid"); then _BIAS adds bias[i] to row i of D, _BGRADB writes bias[j] = sum_p op(B)(p, j).
// Products accumulate in double and D is rounded once to its type. Throws std::invalid_argument with every violated
// rule (gemm_rules.h) instead of running a call the library would refuse or run wrongly.
void interpret_gemm(const GemmCall& call);

// sum += addend (vitpipe's own kernel, here for the bias gradient's scratch).
void interpret_vector_add(const VectorAdd& add);

}  // namespace vitpipe::cuda
