// Proof 2 for cuBLASLt (issue 24): each linear-layer GEMM description (backend/cuda/calls/linear_gemm_calls.h),
// executed by the CPU interpreter with cuBLASLt's column-major semantics, reproduces the CPU Backend for the model's
// shapes and dtypes; descriptions with a wrong transpose, leading dimension, epilogue target or alignment are caught.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/calls/gemm_interpreter.h"
#include "backend/cuda/calls/gemm_rules.h"
#include "backend/cuda/calls/linear_gemm_calls.h"
#include "call_test_support.h"

using namespace vitpipe;
using call_tests::matrix;
using call_tests::random_tensor;
using call_tests::relative_difference;

namespace {

// One linear layer of a model: M rows (tokens x batch) by K inputs to N outputs.
struct LinearCase {
  const char* name;
  int64_t m, k, n;
};

// ViT-Tiny (D 192, MLP 768) over 3 images of 197 tokens (M = 591, no multiple of anything); ViT-Base (D 768,
// MLP 3072) over one image; DINOv2-S with 4 registers (D 384, T = 1 + 4 + 256 = 261) over 2 images and without
// registers (T = 257); the patch projection of ViT-B/16 (K = 3 * 16 * 16).
const std::vector<LinearCase>& model_cases() {
  static const std::vector<LinearCase> cases = {
      {"vit_tiny.qkv", 591, 192, 576},      {"vit_tiny.proj", 591, 192, 192}, {"vit_tiny.fc1", 591, 192, 768},
      {"vit_tiny.fc2", 591, 768, 192},      {"vit_base.qkv", 197, 768, 2304}, {"vit_base.fc2", 197, 3072, 768},
      {"dinov2_s_reg.fc1", 522, 384, 1536}, {"dinov2_s.qkv", 257, 384, 1152}, {"vit_b16.patch", 196, 768, 768},
  };
  return cases;
}

struct Dtypes {
  DType operands, out;
};

class LinearGemmCalls : public ::testing::TestWithParam<Dtypes> {
 protected:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

double tolerance_of(const Dtypes& t) { return call_tests::tolerance(t.operands == DType::bf16 ? DType::bf16 : t.out); }

TEST_P(LinearGemmCalls, ForwardWithBiasMatchesTheCpuBackend) {
  const Dtypes t = GetParam();
  for (const LinearCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    const Tensor in = random_tensor({c.m, c.k}, t.operands, 1), w = random_tensor({c.n, c.k}, t.operands, 2, 0.05);
    const Tensor bias = random_tensor({c.n}, DType::f32, 3);
    const Tensor expected = Tensor::empty({c.m, c.n}, t.out), actual = Tensor::zeros({c.m, c.n}, t.out);
    cpu_->linear_forward(in, w, &bias, nullptr, expected);
    const Tensor bias_of_out_type = bias.to(t.out);  // cuBLASLt's bias is of D's type
    cuda::interpret_gemm(cuda::linear_forward_gemm(matrix(in), matrix(w), call_tests::bias_vector(bias_of_out_type),
                                                   nullptr, matrix(actual)));
    EXPECT_LT(relative_difference(actual, expected), tolerance_of(t));
  }
}

TEST_P(LinearGemmCalls, ForwardIntoTheResidualStreamMatchesTheCpuBackend) {
  const Dtypes t = GetParam();
  for (const LinearCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    const Tensor in = random_tensor({c.m, c.k}, t.operands, 4), w = random_tensor({c.n, c.k}, t.operands, 5, 0.05);
    const Tensor bias = random_tensor({c.n}, DType::f32, 6);
    const Tensor residual = random_tensor({c.m, c.n}, DType::f32, 7);
    // out = residual + in W^T + bias: C is the residual stream, D the next one (the model keeps both).
    const Tensor expected = Tensor::empty({c.m, c.n}), actual = Tensor::zeros({c.m, c.n});
    cpu_->linear_forward(in, w, &bias, &residual, expected);
    const cuda::RowMajorMatrix stream = matrix(residual);
    cuda::interpret_gemm(
        cuda::linear_forward_gemm(matrix(in), matrix(w), call_tests::bias_vector(bias), &stream, matrix(actual)));
    EXPECT_LT(relative_difference(actual, expected), tolerance_of({t.operands, DType::f32}));
  }
}

TEST_P(LinearGemmCalls, BackwardInputMatchesTheCpuBackend) {
  const Dtypes t = GetParam();
  for (const LinearCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    const Tensor grad_out = random_tensor({c.m, c.n}, t.operands, 8), w = random_tensor({c.n, c.k}, t.operands, 9);
    const Tensor expected = Tensor::empty({c.m, c.k}, t.out);
    const Tensor actual = random_tensor({c.m, c.k}, t.out, 10);  // garbage: the call overwrites (beta = 0)
    cpu_->linear_backward_input(grad_out, w, expected);
    cuda::interpret_gemm(cuda::linear_backward_input_gemm(matrix(grad_out), matrix(w), matrix(actual)));
    EXPECT_LT(relative_difference(actual, expected), tolerance_of(t));
  }
}

TEST_P(LinearGemmCalls, BackwardWeightAndBiasAddLikeTheCpuBackend) {
  const Dtypes t = GetParam();
  for (const LinearCase& c : model_cases()) {
    SCOPED_TRACE(c.name);
    const Tensor grad_out = random_tensor({c.m, c.n}, t.operands, 11), in = random_tensor({c.m, c.k}, t.operands, 12);
    // Gradients already holding an earlier micro-batch's: both must add.
    const Tensor grad_w0 = random_tensor({c.n, c.k}, DType::f32, 13, 10.0),
                 grad_b0 = random_tensor({c.n}, DType::f32, 14);
    const Tensor expected_w = grad_w0.clone(), expected_b = grad_b0.clone();
    cpu_->linear_backward_weight(grad_out, in, expected_w);
    cpu_->bias_backward(grad_out, expected_b);
    const Tensor actual_w = grad_w0.clone(), actual_b = grad_b0.clone();
    const Tensor scratch = random_tensor({c.n}, DType::f32, 15);  // garbage: _BGRADB overwrites it
    const cuda::LinearWeightGradientCalls calls = cuda::linear_backward_weight_gemm(
        matrix(grad_out), matrix(in), matrix(actual_w), actual_b.f32(), scratch.f32());
    cuda::interpret_gemm(calls.gemm);
    ASSERT_TRUE(calls.bias_add.has_value());
    cuda::interpret_vector_add(*calls.bias_add);
    EXPECT_LT(relative_difference(actual_w, expected_w), tolerance_of({t.operands, DType::f32}));
    EXPECT_LT(relative_difference(actual_b, expected_b), tolerance_of({t.operands, DType::f32}));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinearGemmCalls,
                         ::testing::Values(Dtypes{DType::f32, DType::f32}, Dtypes{DType::bf16, DType::bf16},
                                           Dtypes{DType::bf16, DType::f32}),
                         [](const auto& info) {
                           return std::string(dtype_name(info.param.operands)) + "_to_" + dtype_name(info.param.out);
                         });

// ---- descriptions that are wrong must not pass ----

bool refused(const cuda::GemmCall& call) {
  try {
    cuda::interpret_gemm(call);
  } catch (const std::invalid_argument&) {
    return true;
  }
  return false;
}

TEST(GemmCallMistakes, AWeightNotTransposedComputesAnotherProductAndIsCaught) {
  // A square weight (the attention projection): forgetting op(A) = W still fits every layout rule, so only the
  // numbers can tell. They do.
  auto cpu = make_cpu_backend();
  const Tensor in = random_tensor({197, 192}, DType::f32, 21), w = random_tensor({192, 192}, DType::f32, 22);
  const Tensor expected = Tensor::empty({197, 192}), actual = Tensor::zeros({197, 192});
  cpu->linear_forward(in, w, nullptr, nullptr, expected);
  cuda::GemmCall call = cuda::linear_forward_gemm(matrix(in), matrix(w), {}, nullptr, matrix(actual));
  call.shape.trans_a = cuda::Transpose::none;
  ASSERT_TRUE(cuda::gemm_rule_violations(call).empty());
  cuda::interpret_gemm(call);
  EXPECT_GT(relative_difference(actual, expected), 0.1);
}

TEST(GemmCallMistakes, SwappedTransposesOnARectangularWeightAreRefused) {
  const Tensor in = random_tensor({197, 192}, DType::f32, 23), w = random_tensor({768, 192}, DType::f32, 24);
  const Tensor out = Tensor::zeros({197, 768});
  cuda::GemmCall call = cuda::linear_forward_gemm(matrix(in), matrix(w), {}, nullptr, matrix(out));
  std::swap(call.shape.trans_a, call.shape.trans_b);
  EXPECT_TRUE(refused(call));
}

TEST(GemmCallMistakes, ALeadingDimensionOfTheRowMajorRowsInsteadOfColumnsIsRefused) {
  // The classic: the row-major [M, K] input's leading dimension taken as M (its rows) instead of K. With M < K the
  // column-major view's K rows do not fit.
  const Tensor in = random_tensor({96, 192}, DType::f32, 25), w = random_tensor({192, 192}, DType::f32, 26);
  const Tensor out = Tensor::zeros({96, 192});
  cuda::GemmCall call = cuda::linear_forward_gemm(matrix(in), matrix(w), {}, nullptr, matrix(out));
  call.shape.b.ld = 96;
  EXPECT_TRUE(refused(call));
}

TEST(GemmCallMistakes, ABiasGradientEpilogueStraightIntoTheGradientOverwritesAndIsCaught) {
  // _BGRADB overwrites its vector: aimed at the accumulated bias gradient, the earlier micro-batch's sum is lost.
  auto cpu = make_cpu_backend();
  const Tensor grad_out = random_tensor({394, 192}, DType::f32, 27), in = random_tensor({394, 192}, DType::f32, 28);
  const Tensor grad_b0 = random_tensor({192}, DType::f32, 29, 10.0), grad_w = Tensor::zeros({192, 192});
  const Tensor expected = grad_b0.clone(), actual = grad_b0.clone(), scratch = Tensor::zeros({192});
  cpu->bias_backward(grad_out, expected);
  cuda::LinearWeightGradientCalls calls =
      cuda::linear_backward_weight_gemm(matrix(grad_out), matrix(in), matrix(grad_w), actual.f32(), scratch.f32());
  calls.gemm.data.bias = actual.f32();  // the mistake: no scratch, no add
  cuda::interpret_gemm(calls.gemm);
  EXPECT_GT(relative_difference(actual, expected), 0.1);
  // and the builder refuses to be asked for it
  EXPECT_THROW(
      cuda::linear_backward_weight_gemm(matrix(grad_out), matrix(in), matrix(grad_w), actual.f32(), actual.f32()),
      std::invalid_argument);
}

TEST(GemmCallMistakes, MisalignedPointersAreRefused) {
  // A view starting one bf16 row of 3 elements in: 6 bytes past a 64-byte boundary.
  const Tensor in = random_tensor({65, 192}, DType::bf16, 30), w = random_tensor({192, 192}, DType::bf16, 31);
  const Tensor out = Tensor::zeros({64, 192}, DType::bf16);
  cuda::RowMajorMatrix shifted = matrix(in);
  shifted.data = static_cast<uint16_t*>(shifted.data) + 3;
  shifted.rows = 64;
  EXPECT_TRUE(refused(cuda::linear_forward_gemm(shifted, matrix(w), {}, nullptr, matrix(out))));
  EXPECT_FALSE(refused(cuda::linear_forward_gemm(matrix(in.slice(0, 64)), matrix(w), {}, nullptr, matrix(out))));
}

// No production GEMM is batched yet; a batched one whose batch stride leaves later batches off 16 bytes breaks the
// rules (checked, not run: the tensors hold one batch).
TEST(GemmCallMistakes, ABatchStrideOffSixteenBytesIsRefused) {
  const Tensor in = random_tensor({8, 64}, DType::bf16, 39), w = random_tensor({64, 64}, DType::bf16, 40);
  const Tensor out = Tensor::zeros({8, 64}, DType::bf16);
  cuda::GemmCall call = cuda::linear_forward_gemm(matrix(in), matrix(w), {}, nullptr, matrix(out));
  ASSERT_TRUE(cuda::gemm_rule_violations(call).empty());
  for (cuda::MatrixLayout* l : {&call.shape.a, &call.shape.b, &call.shape.c, &call.shape.d}) {
    l->batch_count = 2;
    l->batch_stride = l->ld * l->cols;  // whole matrices apart: every ld here is a multiple of 8 bf16
  }
  EXPECT_TRUE(cuda::gemm_rule_violations(call).empty());
  call.shape.b.batch_stride += 4;  // 8 bytes on: the second batch of B is misaligned
  EXPECT_FALSE(cuda::gemm_rule_violations(call).empty());
  call.shape.b.batch_stride += 4;
  EXPECT_TRUE(cuda::gemm_rule_violations(call).empty());
}

// --allow-tf32 is one switch for the whole backend: it must turn f32 GEMMs to TF32 and leave bf16 ones valid (a bf16
// GEMM asking for TF32 breaks the rules and cuBLASLt would refuse it).
TEST(GemmCallMistakes, Tf32LeavesBf16GemmsAlone) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor in = random_tensor({8, 64}, dt, 37), w = random_tensor({64, 64}, dt, 38);
    const Tensor out = Tensor::zeros({8, 64}, dt), grad_in = Tensor::zeros({8, 64}, dt);
    const Tensor grad_w = Tensor::zeros({64, 64});
    const cuda::GemmCall calls[] = {
        cuda::linear_forward_gemm(matrix(in), matrix(w), {}, nullptr, matrix(out), true),
        cuda::linear_backward_input_gemm(matrix(out), matrix(w), matrix(grad_in), true),
        cuda::linear_backward_weight_gemm(matrix(out), matrix(in), matrix(grad_w), nullptr, nullptr, true).gemm};
    for (const cuda::GemmCall& call : calls) {
      EXPECT_FALSE(refused(call)) << call.what << " " << dtype_name(dt);
      EXPECT_EQ(call.shape.allow_tf32, dt == DType::f32) << call.what << " " << dtype_name(dt);
    }
  }
}

TEST(GemmCallMistakes, AResidualOfAnotherTypeThanTheOutputIsRefusedByTheBuilder) {
  const Tensor in = random_tensor({8, 64}, DType::bf16, 32), w = random_tensor({64, 64}, DType::bf16, 33);
  const Tensor residual = Tensor::zeros({8, 64}), out = Tensor::zeros({8, 64}, DType::bf16);
  const cuda::RowMajorMatrix r = matrix(residual);
  EXPECT_THROW(cuda::linear_forward_gemm(matrix(in), matrix(w), {}, &r, matrix(out)), std::invalid_argument);
}

TEST(GemmCallMistakes, AnF32BiasOnABf16OutputIsRefused) {
  // cublasLt.h documents bias elements as D's type (outside int8 and fp8 kernels).
  const Tensor in = random_tensor({8, 64}, DType::bf16, 34), w = random_tensor({64, 64}, DType::bf16, 35);
  const Tensor bias = random_tensor({64}, DType::f32, 36), out = Tensor::zeros({8, 64}, DType::bf16);
  EXPECT_THROW(cuda::linear_forward_gemm(matrix(in), matrix(w), call_tests::bias_vector(bias), nullptr, matrix(out)),
               std::invalid_argument);
  const Tensor bf16_bias = bias.to(DType::bf16);
  cuda::GemmCall call =
      cuda::linear_forward_gemm(matrix(in), matrix(w), call_tests::bias_vector(bf16_bias), nullptr, matrix(out));
  EXPECT_FALSE(refused(call));
  call.shape.bias_type = cuda::ElementType::f32;
  call.data.bias = bias.raw();
  EXPECT_TRUE(refused(call));
}

// What the alignment rules say about the model's own shapes, and the padding that meets them:
// test_padded_gemm_calls.cpp.

}  // namespace
