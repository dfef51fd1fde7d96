#include "backend/cuda/calls/gemm_interpreter.h"

#include <stdexcept>
#include <vector>

#include "backend/cuda/calls/gemm_rules.h"
#include "backend/cuda/calls/host_elements.h"

namespace vitpipe::cuda {
namespace {

// op(X) of a column-major matrix, gathered as `outer` contiguous rows of `inner` floats: row r, entry p is
// op(X)(r, p) when `rows_of_op` (A: rows of op(A) by k), else op(X)(p, r) (B: columns of op(B) by k).
std::vector<float> gather(const void* base, const MatrixLayout& l, Transpose t, bool rows_of_op, int64_t outer,
                          int64_t inner) {
  std::vector<float> out(static_cast<size_t>(outer * inner));
  for (int64_t r = 0; r < outer; ++r) {
    for (int64_t p = 0; p < inner; ++p) {
      // op(X)(i, j) = X(i, j) or X(j, i); X(i, j) lives at i + j * ld.
      const int64_t i = rows_of_op ? r : p, j = rows_of_op ? p : r;
      const int64_t index = t == Transpose::none ? i + j * l.ld : j + i * l.ld;
      out[static_cast<size_t>(r * inner + p)] = load_element(base, l.type, index);
    }
  }
  return out;
}

}  // namespace

void interpret_gemm(const GemmCall& call) {
  const std::vector<std::string> violations = gemm_rule_violations(call);
  if (!violations.empty()) {
    std::string message = describe(call) + " breaks cuBLASLt's rules:";
    for (const std::string& v : violations) message += "\n  " + v;
    throw std::invalid_argument(message);
  }
  const GemmShape& s = call.shape;
  for (int32_t batch = 0; batch < s.d.batch_count; ++batch) {
    const void* a = offset_bytes(call.data.a, batch * s.a.batch_stride, s.a.type);
    const void* b = offset_bytes(call.data.b, batch * s.b.batch_stride, s.b.type);
    void* d = offset_bytes(call.data.d, batch * s.d.batch_stride, s.d.type);
    const std::vector<float> op_a = gather(a, s.a, s.trans_a, true, s.m, s.k);   // [m][k]
    const std::vector<float> op_b = gather(b, s.b, s.trans_b, false, s.n, s.k);  // [n][k]
    // C is read in full before D is written: in place (C = D) every element of C is its own old value.
    std::vector<double> c_values;
    if (s.beta != 0.0f) {
      const void* c = offset_bytes(call.data.c, batch * s.c.batch_stride, s.c.type);
      c_values.resize(static_cast<size_t>(s.m * s.n));
      for (int64_t j = 0; j < s.n; ++j) {
        for (int64_t i = 0; i < s.m; ++i)
          c_values[static_cast<size_t>(i + j * s.m)] = load_element(c, s.c.type, i + j * s.c.ld);
      }
    }
    for (int64_t j = 0; j < s.n; ++j) {
      const float* bj = &op_b[static_cast<size_t>(j * s.k)];
      for (int64_t i = 0; i < s.m; ++i) {
        const float* ai = &op_a[static_cast<size_t>(i * s.k)];
        double acc = 0.0;
#pragma omp simd reduction(+ : acc)
        for (int64_t p = 0; p < s.k; ++p) acc += static_cast<double>(ai[p]) * bj[p];
        double value = s.alpha * acc;
        if (s.beta != 0.0f) value += s.beta * c_values[static_cast<size_t>(i + j * s.m)];
        if (s.epilogue == GemmEpilogue::bias) value += load_element(call.data.bias, s.bias_type, i);
        store_element(d, s.d.type, i + j * s.d.ld, value);
      }
    }
    if (s.epilogue == GemmEpilogue::bias_gradient_b) {
      for (int64_t j = 0; j < s.n; ++j) {
        double sum = 0.0;
        for (int64_t p = 0; p < s.k; ++p) sum += op_b[static_cast<size_t>(j * s.k + p)];
        store_element(call.data.bias, s.bias_type, j, sum);
      }
    }
  }
}

void interpret_vector_add(const VectorAdd& add) {
  for (int64_t i = 0; i < add.count; ++i) add.sum[i] += add.addend[i];
}

}  // namespace vitpipe::cuda
