// The model's matrices whose rows are no whole number of 16-byte units (backend/cuda/calls/padded_rows.h), stored
// with padded rows: a ChestX-ray14 head (14 labels, f32 logits), DINOv2's bf16 patch projection (K = 588) and LoRA of
// rank 4 in bf16. Every call the builders describe for them passes the rule checker, the CPU interpreter's results
// equal the CPU Backend's, and the padding, filled with NaN, is neither read (the results stay finite) nor written
// (it stays NaN). Unpadded, the builders refuse with the stride to use.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/calls/gemm_interpreter.h"
#include "backend/cuda/calls/gemm_rules.h"
#include "backend/cuda/calls/linear_gemm_calls.h"
#include "backend/cuda/calls/lora_gemm_calls.h"
#include "backend/cuda/calls/padded_rows.h"
#include "call_test_support.h"

using namespace vitpipe;
using call_tests::matrix;
using call_tests::random_tensor;
using call_tests::relative_difference;

namespace {

constexpr uint16_t kBf16Nan = 0x7fc0;

// A 2-D tensor copied into storage with padded rows, the padding NaN, as the CUDA backend would hold it.
struct PaddedCopy {
  Tensor storage;  // [rows, padded stride]
  cuda::RowMajorMatrix matrix;
};

PaddedCopy padded_copy(const Tensor& t) {
  const int64_t rows = t.dim(0), cols = t.dim(1);
  const cuda::ElementType type = call_tests::element_type(t.dtype());
  const int64_t stride = cuda::padded_row_stride(cols, type), bytes = cuda::element_bytes(type);
  Tensor storage = Tensor::empty({rows, stride}, t.dtype());
  for (int64_t i = 0; i < rows * stride; ++i) {
    if (t.dtype() == DType::f32) {
      storage.f32()[i] = NAN;
    } else {
      std::memcpy(static_cast<char*>(storage.raw()) + i * bytes, &kBf16Nan, bytes);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<char*>(storage.raw()) + r * stride * bytes,
                static_cast<const char*>(t.raw()) + r * cols * bytes, cols * bytes);
  }
  return {storage, cuda::padded_matrix(storage.raw(), rows, cols, type)};
}

// The logical [rows, cols] part, contiguous.
Tensor logical(const PaddedCopy& p) {
  const int64_t bytes = cuda::element_bytes(p.matrix.type);
  Tensor t = Tensor::empty({p.matrix.rows, p.matrix.cols}, p.storage.dtype());
  for (int64_t r = 0; r < p.matrix.rows; ++r) {
    std::memcpy(static_cast<char*>(t.raw()) + r * p.matrix.cols * bytes,
                static_cast<const char*>(p.storage.raw()) + r * p.matrix.stride() * bytes, p.matrix.cols * bytes);
  }
  return t;
}

bool all_finite(const Tensor& t) {
  const Tensor f = t.to(DType::f32);
  for (int64_t i = 0; i < f.numel(); ++i) {
    if (!std::isfinite(f.f32()[i])) return false;
  }
  return true;
}

// Every padding element still NaN: no call wrote there.
bool padding_untouched(const PaddedCopy& p) {
  const Tensor f = p.storage.to(DType::f32);
  for (int64_t r = 0; r < p.matrix.rows; ++r) {
    for (int64_t c = p.matrix.cols; c < p.matrix.stride(); ++c) {
      if (!std::isnan(f.f32()[r * p.matrix.stride() + c])) return false;
    }
  }
  return true;
}

void run_checked(const cuda::GemmCall& call) {
  const std::vector<std::string> violations = cuda::gemm_rule_violations(call);
  EXPECT_TRUE(violations.empty()) << cuda::describe(call) << ": " << (violations.empty() ? "" : violations[0]);
  cuda::interpret_gemm(call);
}

// The result of a call through padded storage against the CPU Backend's on contiguous tensors.
void expect_matches(const PaddedCopy& actual, const Tensor& expected, double tolerance) {
  const Tensor result = logical(actual);
  EXPECT_TRUE(all_finite(result)) << "the padding (NaN) was read";
  EXPECT_TRUE(padding_untouched(actual)) << "the padding was written";
  EXPECT_LT(relative_difference(result, expected), tolerance);
}

// ---- a linear layer whose rows need padding, forward and backward ----

struct PaddedLinearCase {
  const char* name;
  int64_t m, k, n;
  DType operands, out;
};

void PrintTo(const PaddedLinearCase& c, std::ostream* out) { *out << c.name; }

class PaddedLinearGemmCalls : public ::testing::TestWithParam<PaddedLinearCase> {
 protected:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

TEST_P(PaddedLinearGemmCalls, ForwardBackwardInputAndWeightMatchTheCpuBackend) {
  const PaddedLinearCase c = GetParam();
  const double tolerance = call_tests::tolerance(c.operands == DType::bf16 ? DType::bf16 : c.out);
  const Tensor in = random_tensor({c.m, c.k}, c.operands, 1), w = random_tensor({c.n, c.k}, c.operands, 2, 0.05);
  const Tensor bias = random_tensor({c.n}, DType::f32, 3);
  const PaddedCopy p_in = padded_copy(in), p_w = padded_copy(w);

  const Tensor expected_out = Tensor::empty({c.m, c.n}, c.out);
  cpu_->linear_forward(in, w, &bias, nullptr, expected_out);
  const PaddedCopy out = padded_copy(Tensor::zeros({c.m, c.n}, c.out));
  const Tensor bias_of_out_type = bias.to(c.out);
  run_checked(cuda::linear_forward_gemm(p_in.matrix, p_w.matrix, call_tests::bias_vector(bias_of_out_type), nullptr,
                                        out.matrix));
  expect_matches(out, expected_out, tolerance);

  const Tensor grad_out = random_tensor({c.m, c.n}, c.operands, 4);
  const PaddedCopy p_grad_out = padded_copy(grad_out);
  const Tensor expected_grad_in = Tensor::empty({c.m, c.k}, c.out);
  cpu_->linear_backward_input(grad_out, w, expected_grad_in);
  const PaddedCopy grad_in = padded_copy(random_tensor({c.m, c.k}, c.out, 5));
  run_checked(cuda::linear_backward_input_gemm(p_grad_out.matrix, p_w.matrix, grad_in.matrix));
  expect_matches(grad_in, expected_grad_in, tolerance);

  // Gradients holding an earlier micro-batch's: both add.
  const Tensor grad_w0 = random_tensor({c.n, c.k}, DType::f32, 6), grad_b0 = random_tensor({c.n}, DType::f32, 7);
  const Tensor expected_grad_w = grad_w0.clone(), expected_grad_b = grad_b0.clone();
  cpu_->linear_backward_weight(grad_out, in, expected_grad_w);
  cpu_->bias_backward(grad_out, expected_grad_b);
  const PaddedCopy grad_w = padded_copy(grad_w0);
  const Tensor grad_b = grad_b0.clone(), scratch = Tensor::zeros({c.n});
  const cuda::LinearWeightGradientCalls calls =
      cuda::linear_backward_weight_gemm(p_grad_out.matrix, p_in.matrix, grad_w.matrix, grad_b.f32(), scratch.f32());
  run_checked(calls.gemm);
  ASSERT_TRUE(calls.bias_add.has_value());
  cuda::interpret_vector_add(*calls.bias_add);
  expect_matches(grad_w, expected_grad_w, call_tests::tolerance(c.operands));
  EXPECT_LT(relative_difference(grad_b, expected_grad_b), call_tests::tolerance(c.operands));
}

// The 14-label head over 8 images of ViT-Base (f32, and bf16 operands with f32 logits); DINOv2-S's patch projection
// (patch 14: K = 588) over one image's 256 patches, bf16 to bf16 and to f32.
INSTANTIATE_TEST_SUITE_P(
    ModelShapes, PaddedLinearGemmCalls,
    ::testing::Values(PaddedLinearCase{"head14_f32", 8, 768, 14, DType::f32, DType::f32},
                      PaddedLinearCase{"head14_bf16_to_f32", 8, 768, 14, DType::bf16, DType::f32},
                      PaddedLinearCase{"dinov2_patch_bf16", 256, 588, 384, DType::bf16, DType::bf16},
                      PaddedLinearCase{"dinov2_patch_bf16_to_f32", 256, 588, 384, DType::bf16, DType::f32}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- LoRA of rank 4 in bf16 on the query and value blocks ----

TEST(PaddedLoraGemmCalls, Bf16RankFourMatchesTheCpuBackend) {
  constexpr int64_t kM = 394, kD = 192, kRank = 4;  // ViT-Tiny, 2 images
  constexpr float kScale = 4.0f;                    // lora_alpha 16 / r 4
  auto cpu = make_cpu_backend();
  const DType type = DType::bf16;
  for (const int64_t column : {int64_t{0}, 2 * kD}) {
    SCOPED_TRACE("column " + std::to_string(column));
    const Tensor in = random_tensor({kM, kD}, type, 11), a = random_tensor({kRank, kD}, type, 12, 0.1);
    const Tensor b = random_tensor({kD, kRank}, type, 13, 0.1), out0 = random_tensor({kM, 3 * kD}, type, 14);
    const PaddedCopy p_in = padded_copy(in), p_a = padded_copy(a), p_b = padded_copy(b);
    const Tensor expected_out = out0.clone(), expected_low = Tensor::empty({kM, kRank}, type);
    cpu->lora_forward(in, a, b, kScale, expected_low, expected_out, column);
    const PaddedCopy out = padded_copy(out0), low = padded_copy(Tensor::zeros({kM, kRank}, type));
    for (const cuda::GemmCall& call :
         cuda::lora_forward_gemms(p_in.matrix, p_a.matrix, p_b.matrix, kScale, low.matrix, out.matrix, column)) {
      run_checked(call);
    }
    const double tolerance = call_tests::tolerance(type);
    expect_matches(low, expected_low, tolerance);
    expect_matches(out, expected_out, tolerance);

    const Tensor grad_out = random_tensor({kM, 3 * kD}, type, 15), grad_in0 = random_tensor({kM, kD}, type, 16);
    const Tensor grad_a0 = random_tensor({kRank, kD}, DType::f32, 17),
                 grad_b0 = random_tensor({kD, kRank}, DType::f32, 18);
    const Tensor e_in = grad_in0.clone(), e_a = grad_a0.clone(), e_b = grad_b0.clone();
    cpu->lora_backward(grad_out, column, in, a, b, kScale, expected_low, &e_in, &e_a, &e_b);
    const PaddedCopy p_grad_out = padded_copy(grad_out), t = padded_copy(Tensor::zeros({kM, kRank}, type));
    const PaddedCopy g_in = padded_copy(grad_in0), g_a = padded_copy(grad_a0), g_b = padded_copy(grad_b0);
    for (const cuda::GemmCall& call :
         cuda::lora_backward_gemms(p_grad_out.matrix, column, p_in.matrix, p_a.matrix, p_b.matrix, kScale, low.matrix,
                                   t.matrix, &g_in.matrix, &g_a.matrix, &g_b.matrix)) {
      run_checked(call);
    }
    expect_matches(g_in, e_in, tolerance);
    expect_matches(g_a, e_a, tolerance);
    expect_matches(g_b, e_b, tolerance);
  }
}

// ---- unpadded, the builders refuse and say what to do ----

std::string refusal(const std::function<void()>& build) {
  try {
    build();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(PaddedRows, UnpaddedRowsAreRefusedWithTheStrideToUse) {
  const Tensor in = random_tensor({8, 768}, DType::f32, 21), w = random_tensor({14, 768}, DType::f32, 22);
  const Tensor logits = Tensor::zeros({8, 14});
  EXPECT_EQ(refusal([&] { cuda::linear_forward_gemm(matrix(in), matrix(w), {}, nullptr, matrix(logits)); }),
            "linear_forward: out [8, 14] of f32 has rows 56 bytes apart, no whole number of 16-byte units: store it "
            "with rows of 16 (padded_rows.h)");
  const Tensor patches = random_tensor({4, 588}, DType::bf16, 23), pw = random_tensor({384, 588}, DType::bf16, 24);
  const Tensor out = Tensor::zeros({4, 384}, DType::bf16);
  EXPECT_NE(refusal([&] {
              cuda::linear_forward_gemm(matrix(patches), matrix(pw), {}, nullptr, matrix(out));
            }).find("in [4, 588] of bf16 has rows 1176 bytes apart"),
            std::string::npos);
  const Tensor a = random_tensor({4, 192}, DType::bf16, 25), b = random_tensor({192, 4}, DType::bf16, 26);
  const Tensor x = random_tensor({8, 192}, DType::bf16, 27), low = Tensor::zeros({8, 4}, DType::bf16);
  const Tensor qkv = Tensor::zeros({8, 576}, DType::bf16);
  EXPECT_NE(refusal([&] {
              cuda::lora_forward_gemms(matrix(x), matrix(a), matrix(b), 4.0f, matrix(low), matrix(qkv), 0);
            }).find("store it with rows of 8"),
            std::string::npos);
}

TEST(PaddedRows, StridesRoundUpToSixteenBytes) {
  EXPECT_EQ(cuda::padded_row_stride(14, cuda::ElementType::f32), 16);
  EXPECT_EQ(cuda::padded_row_stride(16, cuda::ElementType::f32), 16);
  EXPECT_EQ(cuda::padded_row_stride(588, cuda::ElementType::bf16), 592);
  EXPECT_EQ(cuda::padded_row_stride(588, cuda::ElementType::f32), 588);
  EXPECT_EQ(cuda::padded_row_stride(4, cuda::ElementType::bf16), 8);
  EXPECT_EQ(cuda::padded_row_stride(4, cuda::ElementType::f32), 4);
  EXPECT_EQ(cuda::padded_row_stride(768, cuda::ElementType::bf16), 768);
}

}  // namespace
