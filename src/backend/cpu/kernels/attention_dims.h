// The sizes both attention kernels (all tokens, classifier token only) read off a [B, T, 3D] q|k|v tensor.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"
#include "util/error.h"

namespace vitpipe::cpu {

struct AttentionDims {
  int64_t batch, tokens, hidden, heads, head_dim;
};

inline AttentionDims attention_dims(const Tensor& qkv, int64_t heads, const char* kernel) {
  VP_REQUIRE(qkv.rank() == 3 && qkv.dim(2) % 3 == 0, kernel, ": qkv must be [B, T, 3D], got ",
             shape_string(qkv.shape()));
  AttentionDims a{qkv.dim(0), qkv.dim(1), qkv.dim(2) / 3, heads, 0};
  VP_REQUIRE(heads > 0 && a.hidden % heads == 0, kernel, ": ", heads, " heads do not divide hidden size ", a.hidden);
  a.head_dim = a.hidden / heads;
  return a;
}

}  // namespace vitpipe::cpu
