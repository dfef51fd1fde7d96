#include "backend/cuda/calls/sdpa_rules.h"

#include <cstdint>

#include "backend/cuda/calls/gemm_rules.h"

namespace vitpipe::cuda {
namespace {

struct Checker {
  std::vector<std::string> out;
  int64_t b, h, s_q, s_kv, d;

  void sizes(float attn_scale) {
    if (b <= 0 || h <= 0 || s_q <= 0 || s_kv <= 0) out.push_back("dimensions must be positive");
    if (d % 8 != 0 || d > kSdpaMaxHeadDim) {
      out.push_back("head dimension " + std::to_string(d) + " is not a multiple of 8 up to 128");
    }
    if (!(attn_scale > 0.0f)) out.push_back("the scale must be positive");
  }

  void data(const char* name, const StridedTensor4d& t, int64_t s, const void* pointer) {
    const std::string who = std::string(name) + ": ";
    if (t.type == ElementType::f32) {
      out.push_back(who + "f32: cuDNN's fused attention runs fp16 and bf16 only");
    }
    if (t.dims != std::array<int64_t, 4>{b, h, s, d}) out.push_back(who + describe(t) + " has the wrong dimensions");
    if (t.strides[3] != 1) out.push_back(who + "the features must be contiguous (stride 1)");
    const int64_t unit = kLibraryAlignmentBytes / element_bytes(t.type);
    for (int i = 0; i < 3; ++i) {
      if (t.dims[i] > 1 && t.strides[i] % unit != 0) {
        out.push_back(who + "stride " + std::to_string(t.strides[i]) + " is not a multiple of " + std::to_string(unit) +
                      " elements (16 bytes)");
      }
    }
    pointer_rule(who, pointer);
  }

  void stats(const StridedTensor4d& t, const void* pointer) {
    if (t.type != ElementType::f32 || t.dims != std::array<int64_t, 4>{b, h, s_q, 1}) {
      out.push_back("stats: " + describe(t) + " is not f32 [b, h, s_q, 1]");
    }
    pointer_rule("stats: ", pointer);
  }

  void pointer_rule(const std::string& who, const void* pointer) {
    if (pointer == nullptr) {
      out.push_back(who + "null pointer");
    } else if (reinterpret_cast<uintptr_t>(pointer) % kLibraryAlignmentBytes != 0) {
      out.push_back(who + "pointer is not 16-byte aligned");
    }
  }
};

}  // namespace

std::vector<std::string> sdpa_rule_violations(const SdpaForwardCall& call) {
  const SdpaForwardShape& s = call.shape;
  Checker c{{}, s.batch, s.heads, s.s_q, s.s_kv, s.head_dim};
  c.sizes(s.attn_scale);
  c.data("Q", s.q, s.s_q, call.q);
  c.data("K", s.k, s.s_kv, call.k);
  c.data("V", s.v, s.s_kv, call.v);
  c.data("O", s.o, s.s_q, call.o);
  c.stats(s.stats, call.stats);
  return c.out;
}

std::vector<std::string> sdpa_rule_violations(const SdpaBackwardCall& call) {
  const SdpaBackwardShape& s = call.shape;
  Checker c{{}, s.batch, s.heads, s.s_q, s.s_kv, s.head_dim};
  c.sizes(s.attn_scale);
  c.data("Q", s.q, s.s_q, call.q);
  c.data("K", s.k, s.s_kv, call.k);
  c.data("V", s.v, s.s_kv, call.v);
  c.data("O", s.o, s.s_q, call.o);
  c.data("dO", s.d_o, s.s_q, call.d_o);
  c.data("dQ", s.d_q, s.s_q, call.d_q);
  c.data("dK", s.d_k, s.s_kv, call.d_k);
  c.data("dV", s.d_v, s.s_kv, call.d_v);
  c.stats(s.stats, call.stats);
  return c.out;
}

}  // namespace vitpipe::cuda
