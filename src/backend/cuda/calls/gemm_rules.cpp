#include "backend/cuda/calls/gemm_rules.h"

#include <cstdint>

namespace vitpipe::cuda {
namespace {

std::string text(int64_t v) { return std::to_string(v); }

void check_layout(char name, const MatrixLayout& l, int64_t rows, int64_t cols, int32_t batch_count,
                  std::vector<std::string>& out) {
  const std::string who = std::string(1, name) + ": ";
  if (l.rows != rows || l.cols != cols) {
    out.push_back(who + "layout is " + text(l.rows) + " x " + text(l.cols) + ", the product needs " + text(rows) +
                  " x " + text(cols));
  }
  if (l.ld < (l.rows > 1 ? l.rows : 1)) {
    out.push_back(who + "leading dimension " + text(l.ld) + " is less than its " + text(l.rows) + " rows");
  }
  if (l.ld * element_bytes(l.type) % kLibraryAlignmentBytes != 0) {
    out.push_back(who + "leading dimension " + text(l.ld) + " of " + element_type_name(l.type) +
                  " is not a multiple of " + text(kLibraryAlignmentBytes / element_bytes(l.type)) +
                  " elements (16 bytes)");
  }
  if (l.batch_count != batch_count) out.push_back(who + "batch count differs from D's");
  // Every batch after the first starts batch_stride elements on: a stride of odd bytes misaligns them all.
  if (l.batch_count > 1 && l.batch_stride * element_bytes(l.type) % kLibraryAlignmentBytes != 0) {
    out.push_back(who + "batch stride " + text(l.batch_stride) + " of " + element_type_name(l.type) +
                  " is not a multiple of " + text(kLibraryAlignmentBytes / element_bytes(l.type)) +
                  " elements (16 bytes)");
  }
  if (l.batch_count > 1 && l.batch_stride < l.ld * l.cols && name == 'D') {
    out.push_back(who + "batch stride " + text(l.batch_stride) + " makes the batches overlap");
  }
}

void check_pointer(const char* name, const void* p, std::vector<std::string>& out) {
  if (p == nullptr) {
    out.push_back(std::string(name) + ": null pointer");
  } else if (reinterpret_cast<uintptr_t>(p) % kLibraryAlignmentBytes != 0) {
    out.push_back(std::string(name) + ": pointer is not 16-byte aligned");
  }
}

}  // namespace

std::vector<std::string> gemm_rule_violations(const GemmCall& call) {
  const GemmShape& s = call.shape;
  std::vector<std::string> out;
  if (s.m <= 0 || s.n <= 0 || s.k <= 0) out.push_back("m, n and k must be positive");
  const bool ta = s.trans_a == Transpose::transpose, tb = s.trans_b == Transpose::transpose;
  const int32_t batches = s.d.batch_count;
  check_layout('A', s.a, ta ? s.k : s.m, ta ? s.m : s.k, batches, out);
  check_layout('B', s.b, tb ? s.n : s.k, tb ? s.k : s.n, batches, out);
  check_layout('C', s.c, s.m, s.n, batches, out);
  check_layout('D', s.d, s.m, s.n, batches, out);

  if (s.a.type != s.b.type) out.push_back("A and B must share a type");
  if (s.c.type != s.d.type) out.push_back("C and D must share a type (cuBLASLt's Ctype is its Dtype)");
  if (s.a.type == ElementType::f32 && s.d.type != ElementType::f32) out.push_back("f32 operands need an f32 result");
  if (s.allow_tf32 && s.a.type != ElementType::f32) out.push_back("TF32 applies to f32 operands only");

  check_pointer("A", call.data.a, out);
  check_pointer("B", call.data.b, out);
  check_pointer("D", call.data.d, out);
  if (s.beta != 0.0f) {
    check_pointer("C", call.data.c, out);
    if (call.data.c == call.data.d && !(s.c == s.d)) out.push_back("C is D (in place) but their layouts differ");
  }
  if (s.epilogue != GemmEpilogue::none) {
    check_pointer("bias", call.data.bias, out);
    if (s.bias_type != s.d.type) {
      out.push_back("the bias must be of D's type (cublasLt.h: bias and bias-gradient elements are Dtype)");
    }
  }
  if (s.epilogue == GemmEpilogue::bias_gradient_b && call.data.bias != nullptr &&
      (call.data.bias == call.data.d || call.data.bias == call.data.c)) {
    out.push_back("_BGRADB writes its vector: it cannot be C or D");
  }
  return out;
}

}  // namespace vitpipe::cuda
