// The rules a cuDNN 9 SDPA call must meet, checked on the description: fp16/bf16 tensors (cuDNN's fused attention
// runs no fp32: vitpipe's fp32 attention is its own flash kernel); a head dimension that is a multiple of 8 and at
// most 128; dimensions that agree ([b, h, s_q, d] for Q, O, dO, dQ; [b, h, s_kv, d] for K, V, dK, dV; stats fp32
// [b, h, s_q, 1]); unit stride along the features and strides of whole 16-byte units elsewhere; 16-byte pointers.
#pragma once

#include <string>
#include <vector>

#include "backend/cuda/calls/sdpa_call.h"

namespace vitpipe::cuda {

constexpr int64_t kSdpaMaxHeadDim = 128;

std::vector<std::string> sdpa_rule_violations(const SdpaForwardCall& call);
std::vector<std::string> sdpa_rule_violations(const SdpaBackwardCall& call);

}  // namespace vitpipe::cuda
