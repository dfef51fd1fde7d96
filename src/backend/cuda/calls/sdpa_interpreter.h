// A CPU interpreter of the cuDNN SDPA descriptions: each tensor is read and written only through its own dimensions
// and strides, so a stride or layout mistake in a description shows as wrong numbers in the tests
// (tests/cuda/test_sdpa_calls.cpp), where they are held to the CPU Backend.
#pragma once

#include "backend/cuda/calls/sdpa_call.h"

namespace vitpipe::cuda {

// O = softmax(scale Q K^T) V per (batch, head), stats = log sum_j exp(scale q_i . k_j) (natural log, f32): cuDNN's
// SDPA forward with generated stats. Double arithmetic; O rounded once to its type. Throws std::invalid_argument
// listing the violated rules (sdpa_rules.h).
void interpret_sdpa_forward(const SdpaForwardCall& call);

// cuDNN's SDPA backward from the saved stats: P = exp(scale S - stats), D = rowsum(dO * O), dV = P^T dO,
// dS = P * (dO V^T - D), dQ = scale dS K, dK = scale dS^T Q; dQ, dK, dV overwritten.
void interpret_sdpa_backward(const SdpaBackwardCall& call);

void interpret_memset(const MemsetCall& call);

}  // namespace vitpipe::cuda
