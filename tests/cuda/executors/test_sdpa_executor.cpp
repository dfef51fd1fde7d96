// The CUDA module's SdpaExecutor (src/backend/cuda/sdpa_executor.cpp) compiled against a fake cuDNN backend API
// (fake_cudnn.cpp) that rebuilds each SDPA call from the graph's tensor descriptors and the variant pack and runs it
// through the strided CPU interpreter: the executor's graphs (which tensor is which, dimensions, strides, ids,
// pointers, the by-value scale) reproduce the CPU Backend's attention; plans are cached per shape; the native
// backward pass runs only on engines cuDNN does not mark non-deterministic. Where the native SDPA_BWD is refused (the
// fake's default, as cuDNN up to 9.20 is reported to), the backward pass is cudnn-frontend's composite graph, which
// the fake holds to the frontend's (frontend_sdpa_backward.h) and runs op by op. Whether the real cuDNN accepts these
// graphs is unverified until a GPU runs them.
#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "../call_test_support.h"
#include "../fakes/fake_cuda_runtime.h"
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

// The backward pass of one shape on the executor and on the CPU backend; the executor's path.
struct BackwardCase {
  Fixture f;
  int64_t B, T, D, H;
  Tensor qkv, out, lse, grad_out, expected, actual;

  BackwardCase(int64_t b, int64_t t, int64_t d, int64_t h, uint64_t seed)
      : B(b),
        T(t),
        D(d),
        H(h),
        qkv(random_tensor({b, t, 3 * d}, DType::bf16, seed, 0.7)),
        out(Tensor::empty({b, t, d}, DType::bf16)),
        lse(Tensor::empty({b, h, t})),
        grad_out(random_tensor({b, t, d}, DType::bf16, seed + 1)),
        expected(Tensor::empty(qkv.shape(), DType::bf16)),
        actual(Tensor::zeros(qkv.shape(), DType::bf16)) {
    f.cpu->attention_forward(qkv, H, lse, out);
    f.cpu->attention_backward(grad_out, qkv, out, lse, H, expected, nullptr);
  }
  cuda::SdpaBackwardCall call() {
    return cuda::attention_backward_sdpa(packed(qkv, H), grad_out.raw(), out.raw(), lse.f32(), actual.raw());
  }
};

// The fake's own switches back to their defaults at the end of a test.
struct FakeDefaults {
  ~FakeDefaults() {
    fake_cudnn::set_native_sdpa_backward_refused(true);
    fake_cudnn::set_all_engines_nondeterministic(false);
    fake_cudnn::set_native_sdpa_backward_execution_fails(false);
    fake_cuda_runtime::cudnn_version = 91900;
  }
};

// The native SDPA_BWD refused (BAD_PARAM, as reported for cuDNN up to 9.20): the backward pass is cudnn-frontend's
// composite graph (held to the frontend's by the fake at finalisation), its deterministic dP-workspace variant, at
// ViT-B/16's head dimension and token count; the numbers are the CPU backend's.
TEST(SdpaExecutorOnFakeCudnn, RefusedNativeBackwardTakesTheFrontendsCompositeGraph) {
  FakeDefaults defaults;
  BackwardCase c(1, 197, 128, 2, 41);
  const int composites = fake_cudnn::counters().composite_graphs_finalized;
  const cuda::SdpaBackwardCall call = c.call();
  ASSERT_TRUE(call.shape.deterministic);
  ASSERT_NO_THROW(c.f.executor.run(call, nullptr)) << fake_cudnn::last_error();
  EXPECT_LT(relative_difference(c.actual, c.expected), kTolerance);
  EXPECT_EQ(fake_cudnn::counters().composite_graphs_finalized, composites + 1);
  EXPECT_TRUE(fake_cudnn::counters().last_composite_dp_workspace);
  const std::string path = c.f.executor.backward_path(call.shape);
  EXPECT_EQ(path.rfind("cudnn composite graph (cudnn-frontend's sdpa_backward, dP workspace: deterministic)", 0), 0u)
      << path;
  EXPECT_NE(path.find("the native SDPA_BWD refused: cudnnBackendFinalize failed: SDPA_BWD: CUDNN_STATUS_BAD_PARAM"),
            std::string::npos)
      << path;
  EXPECT_EQ(fake_cudnn::counters().last_engine, 1) << "the engine not marked non-deterministic comes first";
  // The softmax_sum intermediate (fp32 [b, h, s_q, 1]) lives in the workspace after the engine's part.
  ASSERT_FALSE(c.f.asked.empty());
  EXPECT_EQ(c.f.asked.back(), size_t{256} * ((1 * 2 * 197 * 4 + 255) / 256));
}

// Without determinism asked: the frontend's default variant, dQ accumulated in an fp32 dQ_accum in the workspace and
// copied by an identity op (18 operations).
TEST(SdpaExecutorOnFakeCudnn, NonDeterministicBackwardTakesTheDqAccumulatorVariant) {
  FakeDefaults defaults;
  BackwardCase c(2, 33, 64, 4, 43);  // head dim 16, an odd token count
  cuda::SdpaBackwardCall call = c.call();
  call.shape.deterministic = false;
  ASSERT_NO_THROW(c.f.executor.run(call, nullptr)) << fake_cudnn::last_error();
  EXPECT_LT(relative_difference(c.actual, c.expected), kTolerance);
  EXPECT_FALSE(fake_cudnn::counters().last_composite_dp_workspace);
  EXPECT_NE(c.f.executor.backward_path(call.shape).find("fp32 dQ accumulator"), std::string::npos);
  EXPECT_EQ(fake_cudnn::counters().last_engine, 0) << "any engine, in the heuristic's order";
  const size_t softmax_sum = 2 * 4 * 33 * 4, accumulator = 2 * 4 * 33 * 16 * 4;
  const auto aligned = [](size_t b) { return (b + 255) / 256 * 256; };
  ASSERT_FALSE(c.f.asked.empty());
  EXPECT_EQ(c.f.asked.back(), aligned(softmax_sum) + aligned(accumulator));
}

// The engine adds dS K into dQ_accum, which cudnn-frontend zeroes before every execution for cuDNN before 9.6 (its
// memset workspace modification; later engines zero it themselves) and the executor zeroes always: with the workspace
// holding what an earlier op left there, and on a second run of the same plan (the first run's sums still in it), dQ
// is still the CPU backend's.
TEST(SdpaExecutorOnFakeCudnn, DqAccumulatorIsZeroedBeforeEveryExecution) {
  FakeDefaults defaults;
  BackwardCase c(1, 33, 64, 4, 47);
  cuda::SdpaBackwardCall call = c.call();
  call.shape.deterministic = false;
  c.f.workspace.assign(size_t{4} << 20, static_cast<char>(0x41));  // floats of about 12.1 everywhere
  for (int run = 0; run < 2; ++run) {
    ASSERT_NO_THROW(c.f.executor.run(call, nullptr)) << fake_cudnn::last_error();
    EXPECT_FALSE(fake_cudnn::counters().last_composite_dp_workspace);
    EXPECT_LT(relative_difference(c.actual, c.expected), kTolerance) << "run " << run;
  }
}

// Every engine marked non-deterministic: filtering the native SDPA_BWD's engines leaves none (the old executor then
// refused the call and bf16 backward took the fallback); the frontend's dP-workspace graph, deterministic by
// construction, still runs, and the path says which engine it took.
TEST(SdpaExecutorOnFakeCudnn, EnginesAllMarkedNonDeterministicStillRunTheDpWorkspaceGraph) {
  FakeDefaults defaults;
  fake_cudnn::set_native_sdpa_backward_refused(false);
  fake_cudnn::set_all_engines_nondeterministic(true);
  BackwardCase c(1, 40, 64, 2, 47);
  const cuda::SdpaBackwardCall call = c.call();
  ASSERT_NO_THROW(c.f.executor.run(call, nullptr)) << fake_cudnn::last_error();
  EXPECT_LT(relative_difference(c.actual, c.expected), kTolerance);
  const std::string path = c.f.executor.backward_path(call.shape);
  EXPECT_NE(path.find("dP workspace: deterministic), on an engine cuDNN marks non-deterministic"), std::string::npos)
      << path;
  EXPECT_NE(path.find("none of 2 engine configurations finalises deterministically"), std::string::npos) << path;
}

// A cuDNN that finalises the native SDPA_BWD on a deterministic engine runs it: the first try, no composite graph.
TEST(SdpaExecutorOnFakeCudnn, NativeBackwardIsTheFirstTry) {
  FakeDefaults defaults;
  fake_cudnn::set_native_sdpa_backward_refused(false);
  BackwardCase c(1, 40, 64, 2, 53);
  const int composites = fake_cudnn::counters().composite_graphs_finalized;
  const cuda::SdpaBackwardCall call = c.call();
  ASSERT_NO_THROW(c.f.executor.run(call, nullptr)) << fake_cudnn::last_error();
  EXPECT_LT(relative_difference(c.actual, c.expected), kTolerance);
  EXPECT_EQ(c.f.executor.backward_path(call.shape), "cudnn native SDPA_BWD");
  EXPECT_EQ(fake_cudnn::counters().composite_graphs_finalized, composites);
}

// A native SDPA_BWD that finalises but fails to execute: the call still runs, on the composite graph, which the shape
// keeps from then on.
TEST(SdpaExecutorOnFakeCudnn, NativeBackwardFailingToExecuteFallsThroughToTheCompositeGraph) {
  FakeDefaults defaults;
  fake_cudnn::set_native_sdpa_backward_refused(false);
  fake_cudnn::set_native_sdpa_backward_execution_fails(true);
  BackwardCase c(1, 40, 64, 2, 67);
  const cuda::SdpaBackwardCall call = c.call();
  ASSERT_NO_THROW(c.f.executor.run(call, nullptr)) << fake_cudnn::last_error();
  EXPECT_LT(relative_difference(c.actual, c.expected), kTolerance);
  const std::string path = c.f.executor.backward_path(call.shape);
  EXPECT_NE(path.find("(the native SDPA_BWD refused: it finalised, then cudnnBackendExecute failed: SDPA_BWD: "
                      "CUDNN_STATUS_EXECUTION_FAILED"),
            std::string::npos)
      << path;
  const int composites = fake_cudnn::counters().composite_graphs_finalized;
  ASSERT_NO_THROW(c.f.executor.run(call, nullptr)) << fake_cudnn::last_error();
  EXPECT_EQ(fake_cudnn::counters().composite_graphs_finalized, composites) << "planned again";
}

// Up to cuDNN 9.15 the frontend adds a "workaround padding mask" when s_kv is not a multiple of 128, which vitpipe
// does not build: the composite graph is refused there with the reason (the caller's cue to fall back); at 256 tokens
// it runs.
TEST(SdpaExecutorOnFakeCudnn, CompositeGraphRefusedWhereTheFrontendAddsItsPaddingWorkaround) {
  FakeDefaults defaults;
  fake_cuda_runtime::cudnn_version = 91500;
  {
    BackwardCase c(1, 197, 64, 1, 59);
    try {
      c.f.executor.run(c.call(), nullptr);
      ADD_FAILURE() << "the composite graph ran without the frontend's padding workaround";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("workaround padding mask for s_kv = 197"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("the native SDPA_BWD: "), std::string::npos) << e.what();
    }
  }
  BackwardCase c(1, 256, 64, 1, 61);
  ASSERT_NO_THROW(c.f.executor.run(c.call(), nullptr)) << fake_cudnn::last_error();
  EXPECT_LT(relative_difference(c.actual, c.expected), kTolerance);
}

// The fake finalises no graph of several operations but cudnn-frontend's composite backward: here, two.
TEST(SdpaExecutorOnFakeCudnn, FakeRefusesAGraphThatIsNotTheFrontends) {
  std::vector<cudnnBackendDescriptor_t> made;
  const auto make = [&](cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = nullptr;
    EXPECT_EQ(cudnnBackendCreateDescriptor(type, &d), CUDNN_STATUS_SUCCESS);
    made.push_back(d);
    return d;
  };
  const auto tensor = [&](int64_t id, bool is_virtual) {
    cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const cudnnDataType_t type = CUDNN_DATA_FLOAT;
    const std::array<int64_t, 4> dims = {1, 1, 4, 4}, strides = {16, 16, 4, 1};
    const int64_t alignment = 16;
    cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
    cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    if (is_virtual) cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    EXPECT_EQ(cudnnBackendFinalize(t), CUDNN_STATUS_SUCCESS);
    return t;
  };
  const auto exp_op = [&](cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const cudnnPointwiseMode_t mode = CUDNN_POINTWISE_EXP;
    const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision);
    EXPECT_EQ(cudnnBackendFinalize(pw), CUDNN_STATUS_SUCCESS);
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    EXPECT_EQ(cudnnBackendFinalize(op), CUDNN_STATUS_SUCCESS);
    return op;
  };
  cudnnBackendDescriptor_t x = tensor(1, false), middle = tensor(2, true), y = tensor(3, false);
  const std::array<cudnnBackendDescriptor_t, 2> ops = {exp_op(x, middle), exp_op(middle, y)};
  cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnHandle_t handle = reinterpret_cast<cudnnHandle_t>(&made);
  cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 2, ops.data());
  cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  EXPECT_EQ(cudnnBackendFinalize(graph), CUDNN_STATUS_BAD_PARAM);
  EXPECT_NE(fake_cudnn::last_error().find("2 operations; cudnn-frontend's sdpa_backward has 17"), std::string::npos)
      << fake_cudnn::last_error();
  for (cudnnBackendDescriptor_t d : made) cudnnBackendDestroyDescriptor(d);
}

}  // namespace
