// Proof 1 for the fp32 flash attention (issue 24): the kernel's arithmetic (backend/cuda/kernels/
// flash_attention_math.h), run on the CPU in the kernel's block order, against a float64 reference written from the
// softmax formula and against the CPU Backend's fp32 attention: output, log-sum-exp and the q|k|v gradients, at
// 1e-5 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/kernels/flash_attention_math.h"
#include "call_test_support.h"

using namespace vitpipe;
using call_tests::kF32Tolerance;
using call_tests::random_tensor;
using call_tests::relative_difference;

namespace {

struct AttentionCase {
  const char* name;
  int64_t batch, tokens, hidden, heads;
};

const std::vector<AttentionCase>& cases() {
  static const std::vector<AttentionCase> c = {
      {"vit_tiny", 2, 197, 192, 3}, {"dinov2_s_reg", 1, 261, 384, 6}, {"vit_s_d128", 1, 257, 256, 2}};
  return c;
}

struct Reference {
  std::vector<double> out, lse, grad_qkv;
};

// Softmax attention in float64 straight from the formulas (two passes, no online rescaling), with its gradients.
Reference float64_attention(const Tensor& qkv, const Tensor& grad_out, int64_t heads) {
  const int64_t B = qkv.dim(0), T = qkv.dim(1), D = qkv.dim(2) / 3, d = D / heads;
  const float* x = qkv.f32();
  const float* g = grad_out.f32();
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Reference r{std::vector<double>(static_cast<size_t>(B * T * D)),
              std::vector<double>(static_cast<size_t>(B * heads * T)),
              std::vector<double>(static_cast<size_t>(B * T * 3 * D), 0.0)};
  std::vector<double> p(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const auto at = [&](int which, int64_t t, int64_t e) {
        return double{x[(b * T + t) * 3 * D + which * D + h * d + e]};
      };
      for (int64_t i = 0; i < T; ++i) {
        double max = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          double s = 0;
          for (int64_t e = 0; e < d; ++e) s += at(0, i, e) * at(1, j, e);
          p[j] = s * scale;
          max = std::max(max, p[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < T; ++j) sum += std::exp(p[j] - max);
        const double lse = max + std::log(sum);
        r.lse[(b * heads + h) * T + i] = lse;
        for (int64_t j = 0; j < T; ++j) p[j] = std::exp(p[j] - lse);
        double row_dot = 0;
        std::vector<double> o(static_cast<size_t>(d), 0.0);
        for (int64_t e = 0; e < d; ++e) {
          for (int64_t j = 0; j < T; ++j) o[e] += p[j] * at(2, j, e);
          r.out[(b * T + i) * D + h * d + e] = o[e];
          row_dot += g[(b * T + i) * D + h * d + e] * o[e];
        }
        for (int64_t j = 0; j < T; ++j) {
          double dp = 0;
          for (int64_t e = 0; e < d; ++e) dp += g[(b * T + i) * D + h * d + e] * at(2, j, e);
          const double ds = p[j] * (dp - row_dot) * scale;
          for (int64_t e = 0; e < d; ++e) {
            r.grad_qkv[(b * T + i) * 3 * D + h * d + e] += ds * at(1, j, e);
            r.grad_qkv[(b * T + j) * 3 * D + D + h * d + e] += ds * at(0, i, e);
            r.grad_qkv[(b * T + j) * 3 * D + 2 * D + h * d + e] += p[j] * g[(b * T + i) * D + h * d + e];
          }
        }
      }
    }
  }
  return r;
}

double relative_to(const Tensor& actual, const std::vector<double>& expected) {
  const Tensor a = actual.to(DType::f32);
  double diff = 0.0, scale = 1e-3;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff = std::max(diff, std::abs(a.f32()[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return diff / scale;
}

TEST(FlashAttentionMath, ForwardAndBackwardMatchFloat64AndTheCpuBackend) {
  auto cpu = make_cpu_backend();
  for (const AttentionCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const int64_t B = c.batch, T = c.tokens, D = c.hidden, H = c.heads, d = D / H;
    const Tensor qkv = random_tensor({B, T, 3 * D}, DType::f32, 1, 0.8);
    const Tensor grad_out = random_tensor({B, T, D}, DType::f32, 2);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));

    // The kernel's rows: one per (batch, head, query).
    const Tensor out = Tensor::zeros({B, T, D}), lse = Tensor::zeros({B, H, T});
    const Tensor grad_qkv = Tensor::zeros({B, T, 3 * D});
    std::vector<float> dq(static_cast<size_t>(T * d)), dk(dq.size()), dv(dq.size());
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        const float* q = qkv.f32() + b * T * 3 * D + h * d;
        for (int64_t i = 0; i < T; ++i) {
          lse.f32()[(b * H + h) * T + i] = cuda::flash_forward_row(q + i * 3 * D, q + D, q + 2 * D, T, d, 3 * D, scale,
                                                                   out.f32() + (b * T + i) * D + h * d);
        }
        cuda::flash_backward_head(q, q + D, q + 2 * D, out.f32() + b * T * D + h * d,
                                  grad_out.f32() + b * T * D + h * d, lse.f32() + (b * H + h) * T, T, d, 3 * D, D,
                                  scale, dq.data(), dk.data(), dv.data());
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t e = 0; e < d; ++e) {
            float* row = grad_qkv.f32() + (b * T + t) * 3 * D + h * d + e;
            row[0] = dq[t * d + e], row[D] = dk[t * d + e], row[2 * D] = dv[t * d + e];
          }
        }
      }
    }

    const Reference r = float64_attention(qkv, grad_out, H);
    EXPECT_LT(relative_to(out, r.out), kF32Tolerance);
    EXPECT_LT(relative_to(lse, r.lse), kF32Tolerance);
    EXPECT_LT(relative_to(grad_qkv, r.grad_qkv), kF32Tolerance);

    const Tensor cpu_out = Tensor::empty({B, T, D}), cpu_lse = Tensor::empty({B, H, T});
    const Tensor cpu_grad = Tensor::empty({B, T, 3 * D});
    cpu->attention_forward(qkv, H, cpu_lse, cpu_out);
    cpu->attention_backward(grad_out, qkv, cpu_out, cpu_lse, H, cpu_grad, nullptr);
    EXPECT_LT(relative_difference(out, cpu_out), kF32Tolerance);
    EXPECT_LT(relative_difference(lse, cpu_lse), kF32Tolerance);
    EXPECT_LT(relative_difference(grad_qkv, cpu_grad), kF32Tolerance);
  }
}

TEST(FlashAttentionMath, TheOnlineRescalingKeepsScoresFarPastExpsRange) {
  // Scores that grow block by block up to 400 (exp overflows float past 88): each block raises the running max, so
  // every step rescales; the result must still be the softmax.
  const int64_t keys = 5 * cuda::kFlashKeyBlock + 7, d = 8;
  std::vector<float> q(d, 0.0f), k(static_cast<size_t>(keys * d), 0.0f), v(k.size());
  q[0] = 1.0f;
  for (int64_t j = 0; j < keys; ++j) {
    k[j * d] = 400.0f * static_cast<float>(j) / static_cast<float>(keys) - 50.0f;
    for (int64_t e = 0; e < d; ++e) v[j * d + e] = std::sin(0.1f * static_cast<float>(j + e));
  }
  std::vector<float> out(d);
  const float lse = cuda::flash_forward_row(q.data(), k.data(), v.data(), keys, d, d, 1.0f, out.data());
  double max = -INFINITY, sum = 0.0;
  for (int64_t j = 0; j < keys; ++j) max = std::max(max, double{k[j * d]});
  for (int64_t j = 0; j < keys; ++j) sum += std::exp(k[j * d] - max);
  EXPECT_NEAR(lse, max + std::log(sum), 1e-5 * std::abs(max));
  for (int64_t e = 0; e < d; ++e) {
    double o = 0.0;
    for (int64_t j = 0; j < keys; ++j) o += std::exp(k[j * d] - max) / sum * v[j * d + e];
    EXPECT_NEAR(out[e], o, 1e-5) << e;
  }
  // The first block's rescale factor is 0, not exp(-inf - -inf) = NaN.
  EXPECT_EQ(cuda::online_softmax_rescale(-INFINITY, -INFINITY), 0.0f);
}

}  // namespace
