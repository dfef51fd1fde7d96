// The cuDNN SDPA calls of the Backend's attention ops, built on its packed layout. qkv [B, T, 3D] holds, per token,
// q | k | v, each H heads of d = D / H features; so head h of Q is the [T, d] matrix at qkv + h d with rows 3D apart,
// and as cuDNN's [b, h, s, d] tensor it has strides [T 3D, d, 3D, 1] (K and V the same, D and 2D further). out and
// grad_out [B, T, D]: strides [T D, d, D, 1]. lse [B, H, T] is the stats tensor [b, h, s, 1], strides [H T, T, 1, 1].
// The scale is 1 / sqrt(d). No transposed copies: cuDNN reads the packed layout in place.
#pragma once

#include "backend/cuda/calls/sdpa_call.h"

namespace vitpipe::cuda {

// The Backend's packed q|k|v tensor [batch, tokens, 3 hidden] of `heads` heads.
struct PackedQkv {
  const void* data = nullptr;
  int64_t batch = 0, tokens = 0, hidden = 0, heads = 0;
  ElementType type = ElementType::bf16;
};

// Backend::attention_forward: out [B, T, D], lse [B, H, T]. Throws std::invalid_argument when H does not divide D.
SdpaForwardCall attention_forward_sdpa(const PackedQkv& qkv, float* lse, void* out);
// Backend::attention_backward (without grad_qkv_bias: its column sums are vitpipe's own kernel).
SdpaBackwardCall attention_backward_sdpa(const PackedQkv& qkv, const void* grad_out, const void* out, const float* lse,
                                         void* grad_qkv);

// Backend::cls_attention_forward: the classifier token's query only (s_q = 1); out [B, D], lse [B, H].
SdpaForwardCall cls_attention_forward_sdpa(const PackedQkv& qkv, float* lse, void* out);
// Backend::cls_attention_backward: the call writes dQ at token 0 only, so grad_qkv is zeroed first (the Backend
// promises zero query gradients at every other token).
struct ClsAttentionBackwardCalls {
  MemsetCall zero_grad_qkv;
  SdpaBackwardCall sdpa;
};
ClsAttentionBackwardCalls cls_attention_backward_sdpa(const PackedQkv& qkv, const void* grad_out, const void* out,
                                                      const float* lse, void* grad_qkv);

}  // namespace vitpipe::cuda
