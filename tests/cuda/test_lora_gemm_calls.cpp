// Proof 2 for LoRA's cuBLASLt calls (issue 24): the descriptions of backend/cuda/calls/lora_gemm_calls.h, run by the
// CPU interpreter, reproduce the CPU Backend's lora_forward and lora_backward on a column block of the fused q|k|v
// projection (the query block at column 0, the value block at 2D), in f32 and bf16, adding where the Backend adds.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/calls/gemm_interpreter.h"
#include "backend/cuda/calls/lora_gemm_calls.h"
#include "call_test_support.h"

using namespace vitpipe;
using call_tests::matrix;
using call_tests::random_tensor;
using call_tests::relative_difference;

namespace {

constexpr int64_t kM = 394, kD = 192;  // ViT-Tiny, 2 images
constexpr float kScale = 2.0f;         // lora_alpha 16 / r 8

void run_all(const std::vector<cuda::GemmCall>& calls) {
  for (const cuda::GemmCall& call : calls) cuda::interpret_gemm(call);
}

class LoraGemmCalls : public ::testing::TestWithParam<DType> {};

TEST_P(LoraGemmCalls, ForwardAndBackwardMatchTheCpuBackendOnQkvBlocks) {
  const DType type = GetParam();
  auto cpu = make_cpu_backend();
  for (const int64_t rank : {int64_t{8}, int64_t{16}}) {
    for (const int64_t column : {int64_t{0}, 2 * kD}) {
      SCOPED_TRACE("rank " + std::to_string(rank) + ", column " + std::to_string(column));
      const Tensor in = random_tensor({kM, kD}, type, 1), a = random_tensor({rank, kD}, type, 2, 0.1);
      const Tensor b = random_tensor({kD, rank}, type, 3, 0.1);
      const Tensor out0 = random_tensor({kM, 3 * kD}, type, 4);  // the frozen layer's output, which LoRA adds to
      const Tensor expected_out = out0.clone(), actual_out = out0.clone();
      const Tensor expected_low = Tensor::empty({kM, rank}, type), actual_low = Tensor::zeros({kM, rank}, type);
      cpu->lora_forward(in, a, b, kScale, expected_low, expected_out, column);
      run_all(cuda::lora_forward_gemms(matrix(in), matrix(a), matrix(b), kScale, matrix(actual_low), matrix(actual_out),
                                       column));
      const double tolerance = call_tests::tolerance(type);
      EXPECT_LT(relative_difference(actual_low, expected_low), tolerance);
      EXPECT_LT(relative_difference(actual_out, expected_out), tolerance);

      const Tensor grad_out = random_tensor({kM, 3 * kD}, type, 5);
      const Tensor grad_in0 = random_tensor({kM, kD}, type, 6), grad_a0 = random_tensor({rank, kD}, DType::f32, 7);
      const Tensor grad_b0 = random_tensor({kD, rank}, DType::f32, 8);
      const Tensor e_in = grad_in0.clone(), e_a = grad_a0.clone(), e_b = grad_b0.clone();
      cpu->lora_backward(grad_out, column, in, a, b, kScale, expected_low, &e_in, &e_a, &e_b);
      const Tensor g_in = grad_in0.clone(), g_a = grad_a0.clone(), g_b = grad_b0.clone();
      const Tensor t = Tensor::zeros({kM, rank}, type);
      const cuda::RowMajorMatrix m_in = matrix(g_in), m_a = matrix(g_a), m_b = matrix(g_b);
      run_all(cuda::lora_backward_gemms(matrix(grad_out), column, matrix(in), matrix(a), matrix(b), kScale,
                                        matrix(expected_low), matrix(t), &m_in, &m_a, &m_b));
      EXPECT_LT(relative_difference(g_in, e_in), tolerance);
      EXPECT_LT(relative_difference(g_a, e_a), tolerance);
      EXPECT_LT(relative_difference(g_b, e_b), tolerance);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LoraGemmCalls, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Rank 4 in bf16 (8-byte rows, padded): test_padded_gemm_calls.cpp.

}  // namespace
