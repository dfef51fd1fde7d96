#include "backend/cuda/calls/gemm_call.h"

#include <bit>
#include <cstdio>

namespace vitpipe::cuda {
namespace {

// FNV-1a over the fields one by one (never over the struct's bytes: padding is indeterminate).
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xffu)) * 1099511628211ull;
  }
  void add(const MatrixLayout& l) {
    add(static_cast<uint64_t>(l.type));
    add(static_cast<uint64_t>(l.rows)), add(static_cast<uint64_t>(l.cols)), add(static_cast<uint64_t>(l.ld));
    add(static_cast<uint64_t>(l.batch_count)), add(static_cast<uint64_t>(l.batch_stride));
  }
};

std::string layout_text(char name, const MatrixLayout& l) {
  char text[128];
  std::snprintf(text, sizeof text, " %c %s [%lld x %lld, ld %lld]", name, element_type_name(l.type),
                static_cast<long long>(l.rows), static_cast<long long>(l.cols), static_cast<long long>(l.ld));
  return text;
}

}  // namespace

size_t gemm_shape_hash(const GemmShape& s) {
  Fnv f;
  f.add(static_cast<uint64_t>(s.trans_a)), f.add(static_cast<uint64_t>(s.trans_b));
  f.add(static_cast<uint64_t>(s.m)), f.add(static_cast<uint64_t>(s.n)), f.add(static_cast<uint64_t>(s.k));
  f.add(s.a), f.add(s.b), f.add(s.c), f.add(s.d);
  f.add(s.allow_tf32);
  f.add(std::bit_cast<uint32_t>(s.alpha)), f.add(std::bit_cast<uint32_t>(s.beta));
  f.add(static_cast<uint64_t>(s.epilogue)), f.add(static_cast<uint64_t>(s.bias_type));
  return static_cast<size_t>(f.h);
}

std::string describe(const GemmCall& call) {
  const GemmShape& s = call.shape;
  static const char* const kEpilogues[] = {"none", "BIAS", "BGRADB"};
  char head[160];
  std::snprintf(head, sizeof head, "%s: %c/%c m=%lld n=%lld k=%lld alpha=%g beta=%g epilogue=%s", call.what,
                s.trans_a == Transpose::none ? 'N' : 'T', s.trans_b == Transpose::none ? 'N' : 'T',
                static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k),
                static_cast<double>(s.alpha), static_cast<double>(s.beta), kEpilogues[static_cast<int>(s.epilogue)]);
  return head + layout_text('A', s.a) + layout_text('B', s.b) + layout_text('C', s.c) + layout_text('D', s.d);
}

}  // namespace vitpipe::cuda
