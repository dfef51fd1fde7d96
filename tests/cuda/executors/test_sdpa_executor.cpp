// The CUDA module's SdpaExecutor (src/backend/cuda/sdpa_executor.cpp) compiled against a fake cuDNN backend API
// (fake_cudnn.cpp) that rebuilds each SDPA call from the graph's tensor descriptors and the variant pack and runs it
// through the strided CPU interpreter: the executor's graphs (which tensor is which, dimensions, strides, ids,
// pointers, the by-value scale) reproduce the CPU Backend's attention; plans are cached per shape; the backward pass
// runs only on engines cuDNN does not mark non-deterministic. Whether the real cuDNN accepts these graphs is
// unverified until a GPU runs them.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "../call_test_support.h"
#include "backend/backend.h"
#include "backend/cuda/calls/attention_sdpa_calls.h"
#include "backend/cuda/calls/sdpa_interpreter.h"
#include "backend/cuda/sdpa_executor.h"
#include "fake_cudnn.h"

using namespace vitpipe;
using call_tests::random_tensor;
using call_tests::relative_difference;

namespace {

constexpr double kTolerance = call_tests::kBf16Tolerance;

cuda::PackedQkv packed(const Tensor& qkv, int64_t heads) {
  return {qkv.raw(), qkv.dim(0), qkv.dim(1), qkv.dim(2) / 3, heads, cuda::ElementType::bf16};
}

// Host memory as the workspace, grown as the backend grows its device block; the sizes asked are kept.
struct Fixture {
  std::vector<char> workspace = std::vector<char>(1 << 20);
  std::vector<size_t> asked;
  cuda::SdpaExecutor executor{reinterpret_cast<cudnnHandle_t>(&workspace), [this](size_t bytes) {
                                asked.push_back(bytes);
                                if (bytes > workspace.size()) workspace.resize(bytes);
                                return static_cast<void*>(workspace.data());
                              }};
  std::unique_ptr<Backend> cpu = make_cpu_backend();
};

TEST(SdpaExecutorOnFakeCudnn, AttentionForwardAndBackwardMatchTheCpuBackend) {
  Fixture f;
  const int64_t B = 2, T = 197, D = 192, H = 3;
  const Tensor qkv = random_tensor({B, T, 3 * D}, DType::bf16, 1, 0.7);
  const Tensor out = Tensor::empty({B, T, D}, DType::bf16), lse = Tensor::empty({B, H, T});
  f.cpu->attention_forward(qkv, H, lse, out);
  const Tensor my_out = Tensor::zeros(out.shape(), DType::bf16), my_lse = Tensor::zeros(lse.shape());
  ASSERT_NO_THROW(f.executor.run(cuda::attention_forward_sdpa(packed(qkv, H), my_lse.f32(), my_out.raw()), nullptr))
      << fake_cudnn::last_error();
  EXPECT_LT(relative_difference(my_out, out), kTolerance);
  EXPECT_LT(relative_difference(my_lse, lse), 1e-3);

  const Tensor grad_out = random_tensor(out.shape(), DType::bf16, 2);
  const Tensor expected = Tensor::empty(qkv.shape(), DType::bf16), actual = Tensor::zeros(qkv.shape(), DType::bf16);
  f.cpu->attention_backward(grad_out, qkv, out, lse, H, expected, nullptr);
  ASSERT_NO_THROW(f.executor.run(
      cuda::attention_backward_sdpa(packed(qkv, H), grad_out.raw(), out.raw(), lse.f32(), actual.raw()), nullptr))
      << fake_cudnn::last_error();
  EXPECT_LT(relative_difference(actual, expected), kTolerance);
  EXPECT_EQ(fake_cudnn::counters().last_engine, 1);  // the fake's engine 0 is marked non-deterministic
}

TEST(SdpaExecutorOnFakeCudnn, ClassifierTokenAttentionMatchesTheCpuBackend) {
  Fixture f;
  const int64_t B = 2, T = 261, D = 384, H = 6;  // DINOv2-S with registers
  const Tensor qkv = random_tensor({B, T, 3 * D}, DType::bf16, 3, 0.7);
  const Tensor out = Tensor::empty({B, D}, DType::bf16), lse = Tensor::empty({B, H});
  f.cpu->cls_attention_forward(qkv, H, lse, out);
  const Tensor my_out = Tensor::zeros(out.shape(), DType::bf16), my_lse = Tensor::zeros(lse.shape());
  ASSERT_NO_THROW(f.executor.run(cuda::cls_attention_forward_sdpa(packed(qkv, H), my_lse.f32(), my_out.raw()), nullptr))
      << fake_cudnn::last_error();
  EXPECT_LT(relative_difference(my_out, out), kTolerance);

  const Tensor grad_out = random_tensor(out.shape(), DType::bf16, 4);
  const Tensor expected = Tensor::empty(qkv.shape(), DType::bf16);
  const Tensor actual = random_tensor(qkv.shape(), DType::bf16, 5);
  f.cpu->cls_attention_backward(grad_out, qkv, out, lse, H, expected, nullptr);
  const cuda::ClsAttentionBackwardCalls calls =
      cuda::cls_attention_backward_sdpa(packed(qkv, H), grad_out.raw(), out.raw(), lse.f32(), actual.raw());
  cuda::interpret_memset(calls.zero_grad_qkv);  // cudaMemsetAsync in the backend
  ASSERT_NO_THROW(f.executor.run(calls.sdpa, nullptr)) << fake_cudnn::last_error();
  EXPECT_LT(relative_difference(actual, expected), kTolerance);
}

TEST(SdpaExecutorOnFakeCudnn, OneShapeBuildsOneGraph) {
  Fixture f;
  const Tensor out = Tensor::zeros({1, 197, 192}, DType::bf16), lse = Tensor::zeros({1, 3, 197});
  const int before = fake_cudnn::counters().graphs_finalized;
  for (uint64_t layer = 0; layer < 3; ++layer) {
    const Tensor qkv = random_tensor({1, 197, 576}, DType::bf16, 10 + layer);
    f.executor.run(cuda::attention_forward_sdpa(packed(qkv, 3), lse.f32(), out.raw()), nullptr);
  }
  EXPECT_EQ(fake_cudnn::counters().graphs_finalized - before, 1);
}

// A plan that asks for more workspace than the first block gets it (ViT-B's backward at batch 128 may ask about 77 MB
// for an fp32 dQ accumulator); one past kMaxWorkspaceBytes is passed over, and with no other engine the call is
// refused (the backend's cue to fall back).
TEST(SdpaExecutorOnFakeCudnn, PlansGetTheWorkspaceTheyAskFor) {
  const Tensor qkv = random_tensor({1, 17, 192}, DType::bf16, 31);
  const Tensor out = Tensor::zeros({1, 17, 64}, DType::bf16), lse = Tensor::zeros({1, 2, 17});
  {
    Fixture f;
    fake_cudnn::set_plan_workspace_bytes(80 << 20);
    f.executor.run(cuda::attention_forward_sdpa(packed(qkv, 2), lse.f32(), out.raw()), nullptr);
    fake_cudnn::set_plan_workspace_bytes(0);
    ASSERT_EQ(f.asked.size(), 1u);
    EXPECT_EQ(f.asked[0], size_t{80} << 20);
    EXPECT_EQ(fake_cudnn::counters().last_workspace, static_cast<const void*>(f.workspace.data()));
  }
  {
    Fixture f;
    fake_cudnn::set_plan_workspace_bytes(static_cast<int64_t>(cuda::SdpaExecutor::kMaxWorkspaceBytes) + 1);
    try {
      f.executor.run(cuda::attention_forward_sdpa(packed(qkv, 2), lse.f32(), out.raw()), nullptr);
      ADD_FAILURE() << "a plan past the workspace cap ran";
    } catch (const std::runtime_error& e) {
      // The fake offers two configurations; the message says why each was passed over.
      EXPECT_NE(std::string(e.what()).find("2 asking over 1024 MiB of workspace"), std::string::npos) << e.what();
    }
    fake_cudnn::set_plan_workspace_bytes(0);
    EXPECT_TRUE(f.asked.empty());
  }
}

}  // namespace
