// Proof 2 for cuDNN's fused attention (issue 24): the SDPA descriptions of the Backend's attention ops
// (backend/cuda/calls/attention_sdpa_calls.h), run by the CPU interpreter through their own strides, reproduce the
// CPU Backend's output, log-sum-exp and gradients on the packed q|k|v layout for the model's shapes (bf16: cuDNN's
// SDPA runs no fp32, which the rules refuse); wrong strides, scale or stats layouts are caught.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/calls/attention_sdpa_calls.h"
#include "backend/cuda/calls/sdpa_interpreter.h"
#include "backend/cuda/calls/sdpa_rules.h"
#include "call_test_support.h"

using namespace vitpipe;
using call_tests::random_tensor;
using call_tests::relative_difference;

namespace {

struct AttentionCase {
  const char* name;
  int64_t batch, tokens, hidden, heads;
};

// ViT-Tiny at 224 px over 2 images (197 tokens, 3 heads of 64); ViT-Base (12 heads); DINOv2-S with 4 registers
// (1 + 4 + 256 = 261 tokens) and without (257); 577 tokens (384 px), where the CPU kernel tiles the keys.
const std::vector<AttentionCase>& model_cases() {
  static const std::vector<AttentionCase> cases = {
      {"vit_tiny", 2, 197, 192, 3}, {"vit_base", 1, 197, 768, 12},      {"dinov2_s_reg", 1, 261, 384, 6},
      {"dinov2_s", 1, 257, 384, 6}, {"vit_tiny_384px", 1, 577, 192, 3},
  };
  return cases;
}

cuda::PackedQkv packed(const Tensor& qkv, int64_t heads) {
  return {qkv.raw(), qkv.dim(0), qkv.dim(1), qkv.dim(2) / 3, heads, call_tests::element_type(qkv.dtype())};
}

constexpr double kTolerance = call_tests::kBf16Tolerance;

struct Forwarded {
  Tensor qkv, out, lse;
};

// The CPU Backend's forward pass on random bf16 q|k|v (scaled so that the softmax is neither flat nor one-hot).
Forwarded cpu_forward(Backend& cpu, const AttentionCase& c, uint64_t seed) {
  Forwarded f{random_tensor({c.batch, c.tokens, 3 * c.hidden}, DType::bf16, seed, 0.7),
              Tensor::empty({c.batch, c.tokens, c.hidden}, DType::bf16), Tensor::empty({c.batch, c.heads, c.tokens})};
  cpu.attention_forward(f.qkv, c.heads, f.lse, f.out);
  return f;
}

TEST(SdpaCalls, ForwardMatchesTheCpuBackendOutputAndLogSumExp) {
  auto cpu = make_cpu_backend();
  for (const AttentionCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    const Forwarded expected = cpu_forward(*cpu, c, 1);
    const Tensor out = Tensor::zeros(expected.out.shape(), DType::bf16), lse = Tensor::zeros(expected.lse.shape());
    const cuda::SdpaForwardCall call =
        cuda::attention_forward_sdpa(packed(expected.qkv, c.heads), lse.f32(), out.raw());
    cuda::interpret_sdpa_forward(call);
    EXPECT_LT(relative_difference(out, expected.out), kTolerance);
    EXPECT_LT(relative_difference(lse, expected.lse), 1e-3);  // fp32 statistics of bf16 inputs
  }
}

TEST(SdpaCalls, BackwardMatchesTheCpuBackendGradients) {
  auto cpu = make_cpu_backend();
  for (const AttentionCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    const Forwarded f = cpu_forward(*cpu, c, 2);
    const Tensor grad_out = random_tensor(f.out.shape(), DType::bf16, 3);
    const Tensor expected = Tensor::empty(f.qkv.shape(), DType::bf16);
    cpu->attention_backward(grad_out, f.qkv, f.out, f.lse, c.heads, expected, nullptr);
    const Tensor actual = random_tensor(f.qkv.shape(), DType::bf16, 4);  // garbage: overwritten
    cuda::interpret_sdpa_backward(
        cuda::attention_backward_sdpa(packed(f.qkv, c.heads), grad_out.raw(), f.out.raw(), f.lse.f32(), actual.raw()));
    EXPECT_LT(relative_difference(actual, expected), kTolerance);
  }
}

TEST(SdpaCalls, ClassifierTokenAttentionMatchesTheCpuBackend) {
  auto cpu = make_cpu_backend();
  for (const AttentionCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    const Tensor qkv = random_tensor({c.batch, c.tokens, 3 * c.hidden}, DType::bf16, 5, 0.7);
    const Tensor out = Tensor::empty({c.batch, c.hidden}, DType::bf16), lse = Tensor::empty({c.batch, c.heads});
    cpu->cls_attention_forward(qkv, c.heads, lse, out);
    const Tensor my_out = Tensor::zeros(out.shape(), DType::bf16), my_lse = Tensor::zeros(lse.shape());
    cuda::interpret_sdpa_forward(cuda::cls_attention_forward_sdpa(packed(qkv, c.heads), my_lse.f32(), my_out.raw()));
    EXPECT_LT(relative_difference(my_out, out), kTolerance);
    EXPECT_LT(relative_difference(my_lse, lse), 1e-3);

    const Tensor grad_out = random_tensor(out.shape(), DType::bf16, 6);
    const Tensor expected = Tensor::empty(qkv.shape(), DType::bf16);
    cpu->cls_attention_backward(grad_out, qkv, out, lse, c.heads, expected, nullptr);
    const Tensor actual = random_tensor(qkv.shape(), DType::bf16, 7);  // garbage: the query rows must end zero
    const cuda::ClsAttentionBackwardCalls calls =
        cuda::cls_attention_backward_sdpa(packed(qkv, c.heads), grad_out.raw(), out.raw(), lse.f32(), actual.raw());
    cuda::interpret_memset(calls.zero_grad_qkv);
    cuda::interpret_sdpa_backward(calls.sdpa);
    EXPECT_LT(relative_difference(actual, expected), kTolerance);
  }
}

// ---- descriptions that are wrong must not pass ----

const AttentionCase kSmall = {"vit_tiny", 2, 197, 192, 3};

double forward_out_difference(const cuda::SdpaForwardCall& call, const Forwarded& expected, const Tensor& out) {
  cuda::interpret_sdpa_forward(call);
  return relative_difference(out, expected.out);
}

TEST(SdpaCallMistakes, QueriesReadAsASeparateContiguousTensorAreCaught) {
  // Strides of a [B, H, T, d] tensor of its own instead of the packed [B, T, 3D]: every rule holds, the numbers fail.
  auto cpu = make_cpu_backend();
  const Forwarded expected = cpu_forward(*cpu, kSmall, 8);
  const Tensor out = Tensor::zeros(expected.out.shape(), DType::bf16), lse = Tensor::zeros(expected.lse.shape());
  cuda::SdpaForwardCall call = cuda::attention_forward_sdpa(packed(expected.qkv, kSmall.heads), lse.f32(), out.raw());
  const int64_t t = kSmall.tokens, d = kSmall.hidden / kSmall.heads;
  call.shape.q.strides = {kSmall.heads * t * d, t * d, d, 1};
  ASSERT_TRUE(cuda::sdpa_rule_violations(call).empty());
  EXPECT_GT(forward_out_difference(call, expected, out), 0.1);
}

TEST(SdpaCallMistakes, AScaleOfOneOverDInsteadOfItsRootIsCaught) {
  auto cpu = make_cpu_backend();
  const Forwarded expected = cpu_forward(*cpu, kSmall, 9);
  const Tensor out = Tensor::zeros(expected.out.shape(), DType::bf16), lse = Tensor::zeros(expected.lse.shape());
  cuda::SdpaForwardCall call = cuda::attention_forward_sdpa(packed(expected.qkv, kSmall.heads), lse.f32(), out.raw());
  call.shape.attn_scale = 1.0f / 64.0f;
  cuda::interpret_sdpa_forward(call);
  EXPECT_GT(relative_difference(lse, expected.lse), 1e-2);  // ten times the tolerance: lse is ~log T everywhere
}

TEST(SdpaCallMistakes, StatsWrittenTokenMajorInsteadOfHeadMajorAreCaught) {
  // lse is [B, H, T]; [B, T, H] strides keep the outputs right and scramble the statistics.
  auto cpu = make_cpu_backend();
  const Forwarded expected = cpu_forward(*cpu, kSmall, 10);
  const Tensor out = Tensor::zeros(expected.out.shape(), DType::bf16), lse = Tensor::zeros(expected.lse.shape());
  cuda::SdpaForwardCall call = cuda::attention_forward_sdpa(packed(expected.qkv, kSmall.heads), lse.f32(), out.raw());
  call.shape.stats.strides = {kSmall.tokens * kSmall.heads, 1, kSmall.heads, 1};
  EXPECT_LT(forward_out_difference(call, expected, out), kTolerance);
  EXPECT_GT(relative_difference(lse, expected.lse), 1e-2);  // ten times the tolerance: lse is ~log T everywhere
}

TEST(SdpaCallMistakes, Fp32AndHeadDimensionsCudnnDoesNotRunAreRefused) {
  const Tensor f32_qkv = random_tensor({1, 197, 576}, DType::f32, 11);
  const Tensor out = Tensor::zeros({1, 197, 192}), lse = Tensor::zeros({1, 3, 197});
  EXPECT_THROW(cuda::interpret_sdpa_forward(cuda::attention_forward_sdpa(packed(f32_qkv, 3), lse.f32(), out.raw())),
               std::invalid_argument);
  // 2 heads of 160 features, and 3 of 60 (not a multiple of 8).
  for (const auto& [hidden, heads] : {std::pair<int64_t, int64_t>{320, 2}, {180, 3}}) {
    const Tensor qkv = random_tensor({1, 8, 3 * hidden}, DType::bf16, 12);
    const Tensor o = Tensor::zeros({1, 8, hidden}, DType::bf16), l = Tensor::zeros({1, heads, 8});
    EXPECT_FALSE(cuda::sdpa_rule_violations(cuda::attention_forward_sdpa(packed(qkv, heads), l.f32(), o.raw())).empty())
        << hidden << " / " << heads;
  }
  // and the model's own bf16 shapes meet every rule
  const Tensor qkv = random_tensor({2, 197, 2304}, DType::bf16, 13);
  const Tensor o = Tensor::zeros({2, 197, 768}, DType::bf16), l = Tensor::zeros({2, 12, 197});
  EXPECT_TRUE(cuda::sdpa_rule_violations(cuda::attention_forward_sdpa(packed(qkv, 12), l.f32(), o.raw())).empty());
}

}  // namespace
