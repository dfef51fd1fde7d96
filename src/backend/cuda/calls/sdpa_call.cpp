#include "backend/cuda/calls/sdpa_call.h"

#include <bit>

namespace vitpipe::cuda {
namespace {

// FNV-1a over the fields one by one (never over the struct's bytes: padding is indeterminate).
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xffu)) * 1099511628211ull;
  }
  void add(const StridedTensor4d& t) {
    add(static_cast<uint64_t>(t.type));
    for (int i = 0; i < 4; ++i) add(static_cast<uint64_t>(t.dims[i])), add(static_cast<uint64_t>(t.strides[i]));
  }
  void add_sizes(int64_t b, int64_t h, int64_t sq, int64_t skv, int64_t d, float scale) {
    for (const int64_t v : {b, h, sq, skv, d}) add(static_cast<uint64_t>(v));
    add(std::bit_cast<uint32_t>(scale));
  }
};

}  // namespace

size_t sdpa_shape_hash(const SdpaForwardShape& s) {
  Fnv f;
  f.add_sizes(s.batch, s.heads, s.s_q, s.s_kv, s.head_dim, s.attn_scale);
  for (const StridedTensor4d* t : {&s.q, &s.k, &s.v, &s.o, &s.stats}) f.add(*t);
  return static_cast<size_t>(f.h);
}

size_t sdpa_shape_hash(const SdpaBackwardShape& s) {
  Fnv f;
  f.add_sizes(s.batch, s.heads, s.s_q, s.s_kv, s.head_dim, s.attn_scale);
  for (const StridedTensor4d* t : {&s.q, &s.k, &s.v, &s.o, &s.d_o, &s.stats, &s.d_q, &s.d_k, &s.d_v}) f.add(*t);
  f.add(s.deterministic);
  return static_cast<size_t>(f.h);
}

std::string describe(const StridedTensor4d& t) {
  std::string out = std::string(element_type_name(t.type)) + " [";
  for (int i = 0; i < 4; ++i) out += (i ? ", " : "") + std::to_string(t.dims[i]);
  out += "] strides [";
  for (int i = 0; i < 4; ++i) out += (i ? ", " : "") + std::to_string(t.strides[i]);
  return out + "]";
}

}  // namespace vitpipe::cuda
