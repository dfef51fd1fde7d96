// The adapter of backend/cuda_module_backend.h over the loopback table (backend/cuda_module_loopback.h): the op the
// golden cases of check_module_adapter.py never call (linear_gelu_forward, inference only), and the refusals of
// malformed calls. The other 35 ops are proven bit for bit by tests cuda.module_adapter.*.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "backend/backend_call.h"
#include "backend/cuda_module.h"
#include "backend/cuda_module_backend.h"
#include "backend/cuda_module_loopback.h"
#include "util/random.h"

using namespace vitpipe;

namespace {

Tensor random_tensor(const Shape& shape, Rng& rng, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(rng.normal());
  return dtype == DType::f32 ? t : t.to(dtype);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace

TEST(CudaModuleAdapter, LinearGeluForwardEqualsTheCpuBackend) {
  auto cpu = make_cpu_backend();
  auto adapted = make_cuda_module_backend(cuda_module_loopback(), 0, false);
  EXPECT_EQ(adapted->name(), "cuda");
  Rng rng(5);
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor in = random_tensor({7, 24}, rng, dtype), weight = random_tensor({16, 24}, rng, dtype);
    const Tensor bias = random_tensor({16}, rng);
    Tensor expected = Tensor::zeros({7, 16}, dtype), actual = Tensor::zeros({7, 16}, dtype);
    cpu->linear_gelu_forward(in, weight, bias, expected);
    const long long before = cuda_module_loopback_calls(VITPIPE_OP_LINEAR_GELU_FORWARD);
    adapted->linear_gelu_forward(in, weight, bias, actual);
    EXPECT_EQ(cuda_module_loopback_calls(VITPIPE_OP_LINEAR_GELU_FORWARD), before + 1);
    EXPECT_TRUE(same_bytes(expected, actual)) << dtype_name(dtype);
  }
}

TEST(CudaModuleAdapter, DescriptorsKeepAbsentAndEmptyApart) {
  const Tensor t = Tensor::zeros({2, 3}, DType::bf16);
  const VitpipeTensorDesc present = describe_optional(&t);
  EXPECT_EQ(present.rank, 2);
  EXPECT_EQ(present.dims[0], 2);
  EXPECT_EQ(present.dims[1], 3);
  EXPECT_EQ(present.dtype, VITPIPE_DTYPE_BF16);
  EXPECT_EQ(present.data, t.raw());
  EXPECT_EQ(describe_optional(nullptr).rank, VITPIPE_TENSOR_ABSENT);
  EXPECT_EQ(describe_tensor(Tensor()).rank, VITPIPE_TENSOR_EMPTY);
}

TEST(CudaModuleAdapter, MalformedCallsAreRefusedWithTheOpsName) {
  const VitpipeCudaModule& m = cuda_module_loopback();
  void* instance = nullptr;
  char error[256] = {};
  ASSERT_EQ(m.backend_create(0, 0, &instance, error, sizeof error), 0) << error;
  VitpipeBackendCall call{};
  call.op = VITPIPE_OP_GELU_FORWARD;
  call.tensor_count = 1;
  EXPECT_NE(m.backend_call(instance, &call, error, sizeof error), 0);
  EXPECT_NE(std::string(error).find("gelu_forward: expects 2 tensors"), std::string::npos) << error;
  call.op = 999;
  EXPECT_NE(m.backend_call(instance, &call, error, sizeof error), 0);
  EXPECT_NE(std::string(error).find("unknown op code 999"), std::string::npos) << error;
  m.backend_destroy(instance);
  EXPECT_NE(m.backend_create(3, 0, &instance, error, sizeof error), 0);
}

TEST(CudaModuleAdapter, AnOpsFailureReachesTheCallerWithTheOpsName) {
  auto adapted = make_cuda_module_backend(cuda_module_loopback(), 0, false);
  const Tensor in = Tensor::zeros({4, 8}), out = Tensor::zeros({4, 9});
  try {
    adapted->gelu_forward(in, out);  // the CPU backend behind the table refuses the sizes
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA backend: gelu_forward: "), std::string::npos) << e.what();
  }
}

TEST(CudaModuleAdapter, RefusesAModuleWithoutBackend) {
  VitpipeCudaModule without = cuda_module_loopback();
  without.has_backend = 0;
  without.backend_create = nullptr;
  EXPECT_THROW(make_cuda_module_backend(without, 0, false), std::exception);
}

// The real module, where this machine has no usable GPU: backend_create fails cleanly at its first CUDA call and
// says which; nothing crashes. (On a GPU machine it starts a backend instead.)
TEST(CudaModuleAdapter, TheBuiltModulesBackendSaysWhyItCannotStart) {
  const std::string path = CUDA_MODULE_PATH;
  if (path.empty()) GTEST_SKIP() << "this build has no CUDA module";
  const CudaModuleLoad load = open_cuda_module(path);
  ASSERT_TRUE(load.loaded()) << load.error;
  int count = 0;
  char message[256] = {};
  if (load.module->device_count(&count, message, sizeof message) == 0 && count > 0) {
    auto backend = make_cuda_module_backend(*load.module, 0, false);
    EXPECT_EQ(backend->name(), "cuda");
    return;
  }
  try {
    make_cuda_module_backend(*load.module, 0, false);
    FAIL() << "a backend started without a GPU";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("the CUDA backend could not start on GPU 0: cudaSetDevice(0): CUDA error "),
              std::string::npos)
        << e.what();
  }
}
