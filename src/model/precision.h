// Compute precision. Master weights, gradients and optimizer state are always fp32; bf16 means GEMM operands
// (activations that only feed GEMMs, and a bf16 copy of the weights) are bf16 with fp32 accumulation, while
// LayerNorm, softmax, the residual stream and the loss stay fp32.
#pragma once

#include <string>

#include "tensor/dtype.h"

namespace vitpipe {

enum class Precision { fp32, bf16 };

// "fp32" | "bf16" | "auto" (bf16 where the CPU has bf16 instructions, fp32 elsewhere); throws otherwise.
Precision parse_precision(const std::string& name);
// One line for the log when bf16 runs without bf16 instructions (same numbers, no faster than fp32); else empty.
std::string bf16_speed_note(Precision precision);
const char* precision_name(Precision precision);
inline DType compute_dtype(Precision precision) { return precision == Precision::bf16 ? DType::bf16 : DType::f32; }

}  // namespace vitpipe
