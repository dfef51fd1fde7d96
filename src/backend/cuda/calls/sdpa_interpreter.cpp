#include "backend/cuda/calls/sdpa_interpreter.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "backend/cuda/calls/host_elements.h"
#include "backend/cuda/calls/sdpa_rules.h"

namespace vitpipe::cuda {
namespace {

void refuse_if_broken(const char* what, const std::vector<std::string>& violations) {
  if (violations.empty()) return;
  std::string message = std::string(what) + ": the cuDNN SDPA call breaks its rules:";
  for (const std::string& v : violations) message += "\n  " + v;
  throw std::invalid_argument(message);
}

// One (batch, head) slice of a strided tensor as rows x d doubles, read through the description only.
std::vector<double> gather(const void* base, const StridedTensor4d& t, int64_t b, int64_t h) {
  const int64_t rows = t.dims[2], d = t.dims[3];
  std::vector<double> out(static_cast<size_t>(rows * d));
  for (int64_t s = 0; s < rows; ++s) {
    for (int64_t e = 0; e < d; ++e)
      out[static_cast<size_t>(s * d + e)] = load_element(base, t.type, t.offset(b, h, s, e));
  }
  return out;
}

void scatter(void* base, const StridedTensor4d& t, int64_t b, int64_t h, const std::vector<double>& values) {
  const int64_t rows = t.dims[2], d = t.dims[3];
  for (int64_t s = 0; s < rows; ++s) {
    for (int64_t e = 0; e < d; ++e)
      store_element(base, t.type, t.offset(b, h, s, e), values[static_cast<size_t>(s * d + e)]);
  }
}

double dot(const double* x, const double* y, int64_t d) {
  double sum = 0.0;
  for (int64_t e = 0; e < d; ++e) sum += x[e] * y[e];
  return sum;
}

}  // namespace

void interpret_sdpa_forward(const SdpaForwardCall& call) {
  refuse_if_broken(call.what, sdpa_rule_violations(call));
  const SdpaForwardShape& s = call.shape;
  const int64_t d = s.head_dim;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const std::vector<double> q = gather(call.q, s.q, b, h), k = gather(call.k, s.k, b, h),
                                v = gather(call.v, s.v, b, h);
      std::vector<double> o(static_cast<size_t>(s.s_q * d), 0.0), scores(static_cast<size_t>(s.s_kv));
      for (int64_t i = 0; i < s.s_q; ++i) {
        double max = -INFINITY;
        for (int64_t j = 0; j < s.s_kv; ++j) {
          scores[j] = s.attn_scale * dot(&q[i * d], &k[j * d], d);
          max = std::max(max, scores[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < s.s_kv; ++j) sum += std::exp(scores[j] - max);
        const double lse = max + std::log(sum);
        for (int64_t j = 0; j < s.s_kv; ++j) {
          const double p = std::exp(scores[j] - lse);
          for (int64_t e = 0; e < d; ++e) o[i * d + e] += p * v[j * d + e];
        }
        call.stats[s.stats.offset(b, h, i, 0)] = static_cast<float>(lse);
      }
      scatter(call.o, s.o, b, h, o);
    }
  }
}

void interpret_sdpa_backward(const SdpaBackwardCall& call) {
  refuse_if_broken(call.what, sdpa_rule_violations(call));
  const SdpaBackwardShape& s = call.shape;
  const int64_t d = s.head_dim;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const std::vector<double> q = gather(call.q, s.q, b, h), k = gather(call.k, s.k, b, h),
                                v = gather(call.v, s.v, b, h), o = gather(call.o, s.o, b, h),
                                d_o = gather(call.d_o, s.d_o, b, h);
      std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
      for (int64_t i = 0; i < s.s_q; ++i) {
        const double stat = call.stats[s.stats.offset(b, h, i, 0)];
        const double row_dot = dot(&d_o[i * d], &o[i * d], d);  // D_i
        for (int64_t j = 0; j < s.s_kv; ++j) {
          const double p = std::exp(s.attn_scale * dot(&q[i * d], &k[j * d], d) - stat);
          const double dp = dot(&d_o[i * d], &v[j * d], d);
          const double ds = p * (dp - row_dot);
          for (int64_t e = 0; e < d; ++e) {
            dv[j * d + e] += p * d_o[i * d + e];
            dq[i * d + e] += s.attn_scale * ds * k[j * d + e];
            dk[j * d + e] += s.attn_scale * ds * q[i * d + e];
          }
        }
      }
      scatter(call.d_q, s.d_q, b, h, dq);
      scatter(call.d_k, s.d_k, b, h, dk);
      scatter(call.d_v, s.d_v, b, h, dv);
    }
  }
}

void interpret_memset(const MemsetCall& call) { std::memset(call.data, 0, call.bytes); }

}  // namespace vitpipe::cuda
