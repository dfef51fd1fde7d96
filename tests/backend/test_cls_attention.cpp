// The classifier-token attention kernels against the full attention kernels: token 0's output, and the gradients
// when only token 0's output receives a gradient, must be the same numbers.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend.h"
#include "util/random.h"

using namespace vitpipe;

namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype) {
  Tensor t = Tensor::empty(shape);
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(rng.normal());
  return dtype == DType::f32 ? t : t.to(dtype);
}

// max |a - b| / max(1, max |b|)
double relative_difference(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(DType::f32), y = b.to(DType::f32);
  EXPECT_EQ(x.numel(), y.numel());
  double diff = 0.0, scale = 1.0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(x.f32()[i]) - y.f32()[i]));
    scale = std::max(scale, std::abs(static_cast<double>(y.f32()[i])));
  }
  return diff / scale;
}

struct Case {
  int64_t batch, tokens, hidden, heads;
  DType dtype;
  double tolerance;
};

class ClsAttention : public ::testing::TestWithParam<Case> {};

TEST_P(ClsAttention, MatchesTokenZeroOfFullAttention) {
  const Case c = GetParam();
  auto be = make_cpu_backend();
  const int64_t B = c.batch, T = c.tokens, D = c.hidden, H = c.heads;
  const Tensor qkv = random_tensor({B, T, 3 * D}, 1, c.dtype);

  const Tensor lse = Tensor::empty({B, H, T}), out = Tensor::empty({B, T, D}, c.dtype);
  be->attention_forward(qkv, H, lse, out);
  const Tensor cls_lse = Tensor::empty({B, H}), cls_out = Tensor::empty({B, D}, c.dtype);
  be->cls_attention_forward(qkv, H, cls_lse, cls_out);

  Tensor full_token0 = Tensor::empty({B, D}), full_lse_row0 = Tensor::empty({B, H});
  const Tensor out32 = out.to(DType::f32);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < D; ++j) full_token0.f32()[b * D + j] = out32.f32()[b * T * D + j];
    for (int64_t h = 0; h < H; ++h) full_lse_row0.f32()[b * H + h] = lse.f32()[(b * H + h) * T];
  }
  EXPECT_LT(relative_difference(cls_out, full_token0), c.tolerance);
  EXPECT_LT(relative_difference(cls_lse, full_lse_row0), 1e-5) << "the log-sum-exp is fp32 at every precision";

  // Backward: a gradient at token 0 only.
  const Tensor grad_cls = random_tensor({B, D}, 2, c.dtype);
  Tensor grad_full32 = Tensor::zeros({B, T, D});
  const Tensor grad_cls32 = grad_cls.to(DType::f32);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < D; ++j) grad_full32.f32()[b * T * D + j] = grad_cls32.f32()[b * D + j];
  }
  const Tensor grad_full = c.dtype == DType::f32 ? grad_full32 : grad_full32.to(c.dtype);
  const Tensor grad_qkv = Tensor::empty({B, T, 3 * D}), bias_grad = Tensor::zeros({3 * D});
  be->attention_backward(grad_full, qkv, out, lse, H, grad_qkv, &bias_grad);
  const Tensor cls_grad_qkv = Tensor::empty({B, T, 3 * D});
  const Tensor cls_bias_grad = Tensor::zeros({3 * D});
  be->cls_attention_backward(grad_cls, qkv, cls_out, cls_lse, H, cls_grad_qkv, &cls_bias_grad);
  EXPECT_LT(relative_difference(cls_grad_qkv, grad_qkv), c.tolerance);
  EXPECT_LT(relative_difference(cls_bias_grad, bias_grad), c.tolerance);
  for (int64_t j = D; j < 2 * D; ++j) EXPECT_EQ(cls_bias_grad.f32()[j], 0.0f) << "key bias gradient must stay zero";
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 1; t < T; ++t) {
      for (int64_t j = 0; j < D; ++j) ASSERT_EQ(cls_grad_qkv.f32()[(b * T + t) * 3 * D + j], 0.0f);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ClsAttention,
                         ::testing::Values(Case{2, 5, 8, 2, DType::f32, 1e-5}, Case{3, 197, 192, 3, DType::f32, 1e-5},
                                           Case{2, 50, 384, 6, DType::f32, 1e-5},
                                           Case{2, 197, 192, 3, DType::bf16, 2e-2}));

}  // namespace
