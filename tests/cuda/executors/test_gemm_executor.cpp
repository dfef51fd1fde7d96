// The CUDA module's GemmExecutor (src/backend/cuda/gemm_executor.cpp) compiled against a fake cuBLASLt
// (fake_cublaslt.cpp) that rebuilds each call from the attributes the executor set and runs it with cuBLASLt's
// documented semantics: the translation of descriptions into cuBLASLt calls (attribute types and sizes, which layout
// goes where, the bias pointer per call, alpha and beta) reproduces the CPU Backend, and plans are cached per shape.
// What the real library then does with these calls is unverified until a GPU runs them.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "../call_test_support.h"
#include "backend/backend.h"
#include "backend/cuda/calls/gemm_interpreter.h"
#include "backend/cuda/calls/linear_gemm_calls.h"
#include "backend/cuda/calls/lora_gemm_calls.h"
#include "backend/cuda/gemm_executor.h"
#include "fake_cublaslt.h"

using namespace vitpipe;
using call_tests::matrix;
using call_tests::random_tensor;
using call_tests::relative_difference;

namespace {

class GemmExecutorOnFakeCublasLt : public ::testing::TestWithParam<DType> {
 protected:
  std::vector<char> workspace_ = std::vector<char>(1 << 20);
  cuda::GemmExecutor executor_{reinterpret_cast<cublasLtHandle_t>(this), workspace_.data(), workspace_.size()};
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();

  void run(const cuda::GemmCall& call) { ASSERT_NO_THROW(executor_.run(call, nullptr)) << fake_cublaslt::last_error(); }
};

TEST_P(GemmExecutorOnFakeCublasLt, LinearLayersMatchTheCpuBackend) {
  const DType type = GetParam();
  const double tolerance = call_tests::tolerance(type);
  const int64_t m = 394, k = 192, n = 576;
  const Tensor in = random_tensor({m, k}, type, 1), w = random_tensor({n, k}, type, 2, 0.05);
  const Tensor bias = random_tensor({n}, DType::f32, 3), residual = random_tensor({m, n}, DType::f32, 4);

  const Tensor expected = Tensor::empty({m, n}), actual = Tensor::zeros({m, n});
  cpu_->linear_forward(in, w, &bias, &residual, expected);
  const cuda::RowMajorMatrix r = matrix(residual);
  run(cuda::linear_forward_gemm(matrix(in), matrix(w), call_tests::bias_vector(bias), &r, matrix(actual)));
  EXPECT_LT(relative_difference(actual, expected), tolerance);

  const Tensor grad_out = random_tensor({m, n}, type, 5);
  const Tensor e_in = Tensor::empty({m, k}, type), a_in = Tensor::zeros({m, k}, type);
  cpu_->linear_backward_input(grad_out, w, e_in);
  run(cuda::linear_backward_input_gemm(matrix(grad_out), matrix(w), matrix(a_in)));
  EXPECT_LT(relative_difference(a_in, e_in), tolerance);

  const Tensor gw0 = random_tensor({n, k}, DType::f32, 6, 10.0), gb0 = random_tensor({n}, DType::f32, 7);
  const Tensor e_w = gw0.clone(), e_b = gb0.clone(), a_w = gw0.clone(), a_b = gb0.clone();
  cpu_->linear_backward_weight(grad_out, in, e_w);
  cpu_->bias_backward(grad_out, e_b);
  const Tensor scratch = Tensor::zeros({n});
  const cuda::LinearWeightGradientCalls calls =
      cuda::linear_backward_weight_gemm(matrix(grad_out), matrix(in), matrix(a_w), a_b.f32(), scratch.f32());
  run(calls.gemm);
  cuda::interpret_vector_add(*calls.bias_add);  // vitpipe's own kernel, not cuBLASLt's
  EXPECT_LT(relative_difference(a_w, e_w), tolerance);
  EXPECT_LT(relative_difference(a_b, e_b), tolerance);
}

TEST_P(GemmExecutorOnFakeCublasLt, LoraOnAQkvBlockMatchesTheCpuBackend) {
  const DType type = GetParam();
  const int64_t m = 394, d = 192, rank = 8;
  const Tensor in = random_tensor({m, d}, type, 8), a = random_tensor({rank, d}, type, 9, 0.1);
  const Tensor b = random_tensor({d, rank}, type, 10, 0.1), out0 = random_tensor({m, 3 * d}, type, 11);
  const Tensor e_out = out0.clone(), a_out = out0.clone();
  const Tensor e_low = Tensor::empty({m, rank}, type), a_low = Tensor::zeros({m, rank}, type);
  cpu_->lora_forward(in, a, b, 2.0, e_low, e_out, 2 * d);
  for (const cuda::GemmCall& call :
       cuda::lora_forward_gemms(matrix(in), matrix(a), matrix(b), 2.0f, matrix(a_low), matrix(a_out), 2 * d)) {
    run(call);
  }
  EXPECT_LT(relative_difference(a_out, e_out), call_tests::tolerance(type));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemmExecutorOnFakeCublasLt, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(GemmExecutorPlans, OneShapeIsPlannedOnceAndEachCallUsesItsOwnBias) {
  // Two layers of one shape with different biases: one plan, one heuristic query, and the second call must not add
  // the first one's bias (the bias pointer is set per call, not cached with the plan).
  std::vector<char> workspace(1 << 20);
  cuda::GemmExecutor executor(reinterpret_cast<cublasLtHandle_t>(&workspace), workspace.data(), workspace.size());
  auto cpu = make_cpu_backend();
  const int queries_before = fake_cublaslt::counters().heuristic_queries;
  for (uint64_t layer = 0; layer < 2; ++layer) {
    const Tensor in = random_tensor({197, 192}, DType::f32, 20 + layer),
                 w = random_tensor({768, 192}, DType::f32, 30 + layer);
    const Tensor bias = random_tensor({768}, DType::f32, 40 + layer);
    const Tensor expected = Tensor::empty({197, 768}), actual = Tensor::zeros({197, 768});
    cpu->linear_forward(in, w, &bias, nullptr, expected);
    executor.run(
        cuda::linear_forward_gemm(matrix(in), matrix(w), call_tests::bias_vector(bias), nullptr, matrix(actual)),
        nullptr);
    EXPECT_LT(relative_difference(actual, expected), call_tests::kF32Tolerance) << layer;
  }
  EXPECT_EQ(executor.cached_plans(), 1u);
  EXPECT_EQ(fake_cublaslt::counters().heuristic_queries - queries_before, 1);
}

TEST(GemmExecutorPlans, ACallBreakingTheRulesNeverReachesCublasLt) {
  std::vector<char> workspace(1 << 20);
  cuda::GemmExecutor executor(reinterpret_cast<cublasLtHandle_t>(&workspace), workspace.data(), workspace.size());
  const Tensor in = random_tensor({96, 192}, DType::f32, 50), w = random_tensor({192, 192}, DType::f32, 51);
  const Tensor out = Tensor::zeros({96, 192});
  cuda::GemmCall call = cuda::linear_forward_gemm(matrix(in), matrix(w), {}, nullptr, matrix(out));
  call.shape.b.ld = 96;  // the row-major rows as leading dimension
  const int matmuls_before = fake_cublaslt::counters().matmuls;
  EXPECT_THROW(executor.run(call, nullptr), std::runtime_error);
  EXPECT_EQ(fake_cublaslt::counters().matmuls, matmuls_before);
}

// Issue #42: the heuristic is asked for several algorithms, and one cuBLASLt refuses at run time (NOT_SUPPORTED)
// falls through to the next instead of failing the op; the refused one is not tried again for that shape.
class GemmExecutorFallThrough : public ::testing::Test {
 protected:
  void TearDown() override { fake_cublaslt::behaviour() = {}; }
};

TEST_F(GemmExecutorFallThrough, AnAlgorithmRefusedAtRunTimeFallsThroughToTheNext) {
  std::vector<char> workspace(1 << 20);
  cuda::GemmExecutor executor(reinterpret_cast<cublasLtHandle_t>(&workspace), workspace.data(), workspace.size());
  auto cpu = make_cpu_backend();
  fake_cublaslt::behaviour().refused_algorithm = 0;  // the heuristic's first choice
  const Tensor in = random_tensor({197, 192}, DType::f32, 60), w = random_tensor({576, 192}, DType::f32, 61, 0.05);
  const Tensor bias = random_tensor({576}, DType::f32, 62);
  const Tensor expected = Tensor::empty({197, 576});
  cpu->linear_forward(in, w, &bias, nullptr, expected);
  for (int call = 0; call < 2; ++call) {
    const Tensor actual = Tensor::zeros({197, 576});
    const int matmuls_before = fake_cublaslt::counters().matmuls;
    ASSERT_NO_THROW(executor.run(
        cuda::linear_forward_gemm(matrix(in), matrix(w), call_tests::bias_vector(bias), nullptr, matrix(actual)),
        nullptr))
        << fake_cublaslt::last_error();
    EXPECT_LT(relative_difference(actual, expected), call_tests::kF32Tolerance) << call;
    // The first call tries the refused algorithm, then the next; the second goes straight to the one that ran.
    EXPECT_EQ(fake_cublaslt::counters().matmuls - matmuls_before, call == 0 ? 2 : 1) << call;
  }
  EXPECT_EQ(executor.refused_algorithms(), 1);
  EXPECT_GT(fake_cublaslt::counters().largest_request, 1);
}

TEST_F(GemmExecutorFallThrough, EveryAlgorithmRefusedThrowsNamingTheRefusals) {
  std::vector<char> workspace(1 << 20);
  cuda::GemmExecutor executor(reinterpret_cast<cublasLtHandle_t>(&workspace), workspace.data(), workspace.size());
  fake_cublaslt::behaviour().algorithms_offered = 1;
  fake_cublaslt::behaviour().refused_algorithm = 0;
  const Tensor in = random_tensor({64, 192}, DType::f32, 63), w = random_tensor({192, 192}, DType::f32, 64);
  const Tensor out = Tensor::zeros({64, 192});
  try {
    executor.run(cuda::linear_forward_gemm(matrix(in), matrix(w), {}, nullptr, matrix(out)), nullptr);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("refused every algorithm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos) << e.what();
  }
}

TEST_F(GemmExecutorFallThrough, AnExecutionFailureIsNotRetried) {
  std::vector<char> workspace(1 << 20);
  cuda::GemmExecutor executor(reinterpret_cast<cublasLtHandle_t>(&workspace), workspace.data(), workspace.size());
  fake_cublaslt::behaviour().failing_matmuls = 1;
  const Tensor in = random_tensor({64, 192}, DType::f32, 65), w = random_tensor({192, 192}, DType::f32, 66);
  const Tensor out = Tensor::zeros({64, 192});
  const int matmuls_before = fake_cublaslt::counters().matmuls;
  EXPECT_THROW(executor.run(cuda::linear_forward_gemm(matrix(in), matrix(w), {}, nullptr, matrix(out)), nullptr),
               std::runtime_error);
  EXPECT_EQ(fake_cublaslt::counters().matmuls - matmuls_before, 1);
  EXPECT_EQ(executor.refused_algorithms(), 0);
}

}  // namespace
