#include "backend/cuda/calls/attention_sdpa_calls.h"

#include <cmath>
#include <stdexcept>

namespace vitpipe::cuda {
namespace {

struct Sizes {
  int64_t b, t, dm, h, d;  // batch, tokens, hidden, heads, head dim
};

Sizes sizes(const PackedQkv& qkv) {
  if (qkv.heads <= 0 || qkv.hidden % qkv.heads != 0) {
    throw std::invalid_argument("attention: " + std::to_string(qkv.heads) + " heads do not divide hidden size " +
                                std::to_string(qkv.hidden));
  }
  return {qkv.batch, qkv.tokens, qkv.hidden, qkv.heads, qkv.hidden / qkv.heads};
}

// Q, K or V of the packed tensor for `queries` tokens (T, or 1 for the classifier token).
StridedTensor4d packed_part(const Sizes& z, ElementType type, int64_t queries) {
  return {type, {z.b, z.h, queries, z.d}, {z.t * 3 * z.dm, z.d, 3 * z.dm, 1}};
}

// out / grad_out: [B, rows, D] with rows T (all tokens) or 1 (the classifier token's [B, D]).
StridedTensor4d token_major(const Sizes& z, ElementType type, int64_t rows) {
  return {type, {z.b, z.h, rows, z.d}, {rows * z.dm, z.d, z.dm, 1}};
}

// lse [B, H, rows] as [b, h, s, 1].
StridedTensor4d stats(const Sizes& z, int64_t rows) {
  return {ElementType::f32, {z.b, z.h, rows, 1}, {z.h * rows, rows, 1, 1}};
}

const void* part(const PackedQkv& qkv, const Sizes& z, int which) {
  return static_cast<const char*>(qkv.data) + which * z.dm * element_bytes(qkv.type);
}

SdpaForwardCall forward(const char* what, const PackedQkv& qkv, float* lse, void* out, int64_t queries) {
  const Sizes z = sizes(qkv);
  SdpaForwardCall call;
  call.what = what;
  SdpaForwardShape& s = call.shape;
  s.batch = z.b, s.heads = z.h, s.s_q = queries, s.s_kv = z.t, s.head_dim = z.d;
  s.attn_scale = 1.0f / std::sqrt(static_cast<float>(z.d));
  s.q = packed_part(z, qkv.type, queries);
  s.k = s.v = packed_part(z, qkv.type, z.t);
  s.o = token_major(z, qkv.type, queries);
  s.stats = stats(z, queries);
  call.q = part(qkv, z, 0), call.k = part(qkv, z, 1), call.v = part(qkv, z, 2);
  call.o = out, call.stats = lse;
  return call;
}

SdpaBackwardCall backward(const char* what, const PackedQkv& qkv, const void* grad_out, const void* out,
                          const float* lse, void* grad_qkv, int64_t queries) {
  const Sizes z = sizes(qkv);
  SdpaBackwardCall call;
  call.what = what;
  SdpaBackwardShape& s = call.shape;
  s.batch = z.b, s.heads = z.h, s.s_q = queries, s.s_kv = z.t, s.head_dim = z.d;
  s.attn_scale = 1.0f / std::sqrt(static_cast<float>(z.d));
  s.q = s.d_q = packed_part(z, qkv.type, queries);
  s.k = s.v = s.d_k = s.d_v = packed_part(z, qkv.type, z.t);
  s.o = s.d_o = token_major(z, qkv.type, queries);
  s.stats = stats(z, queries);
  call.q = part(qkv, z, 0), call.k = part(qkv, z, 1), call.v = part(qkv, z, 2);
  call.o = out, call.d_o = grad_out, call.stats = lse;
  char* g = static_cast<char*>(grad_qkv);
  const int64_t part_bytes = z.dm * element_bytes(qkv.type);
  call.d_q = g, call.d_k = g + part_bytes, call.d_v = g + 2 * part_bytes;
  return call;
}

}  // namespace

SdpaForwardCall attention_forward_sdpa(const PackedQkv& qkv, float* lse, void* out) {
  return forward("attention_forward", qkv, lse, out, qkv.tokens);
}

SdpaBackwardCall attention_backward_sdpa(const PackedQkv& qkv, const void* grad_out, const void* out, const float* lse,
                                         void* grad_qkv) {
  return backward("attention_backward", qkv, grad_out, out, lse, grad_qkv, qkv.tokens);
}

SdpaForwardCall cls_attention_forward_sdpa(const PackedQkv& qkv, float* lse, void* out) {
  return forward("cls_attention_forward", qkv, lse, out, 1);
}

ClsAttentionBackwardCalls cls_attention_backward_sdpa(const PackedQkv& qkv, const void* grad_out, const void* out,
                                                      const float* lse, void* grad_qkv) {
  ClsAttentionBackwardCalls calls;
  calls.zero_grad_qkv = {grad_qkv,
                         static_cast<size_t>(qkv.batch * qkv.tokens * 3 * qkv.hidden * element_bytes(qkv.type))};
  calls.sdpa = backward("cls_attention_backward", qkv, grad_out, out, lse, grad_qkv, 1);
  return calls;
}

}  // namespace vitpipe::cuda
