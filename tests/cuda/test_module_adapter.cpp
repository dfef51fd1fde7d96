// The adapter of backend/cuda_module_backend.h over the loopback table (backend/cuda_module_loopback.h): the op the
// golden cases of check_module_adapter.py never call (linear_gelu_forward, inference only), and the refusals of
// malformed calls, and the optimizer ops of ABI version 3 (each carried bit for bit, host arrays and host-memory
// descriptors included). The other 35 ops are proven bit for bit by tests cuda.module_adapter.*.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend_call.h"
#include "backend/cuda_module.h"
#include "backend/cuda_module_backend.h"
#include "backend/cuda_module_loopback.h"
#include "optimizer_cases.h"
#include "util/random.h"

using namespace vitpipe;

namespace {

// The loopback table's "device memory" is host memory: the same bytes, flagged as the module's (Device::cuda), as the
// adapter requires of every tensor it hands over as device memory.
Tensor on_loopback(const Tensor& host) {
  return Tensor::wrap_device(host.raw(), host.shape(), host.dtype(), Device::cuda, std::make_shared<Tensor>(host));
}

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
    cpu->linear_gelu_forward(in, weight, bias, nullptr, expected);
    const long long before = cuda_module_loopback_calls(VITPIPE_OP_LINEAR_GELU_FORWARD);
    adapted->linear_gelu_forward(on_loopback(in), on_loopback(weight), on_loopback(bias), nullptr, on_loopback(actual));
    EXPECT_EQ(cuda_module_loopback_calls(VITPIPE_OP_LINEAR_GELU_FORWARD), before + 1);
    EXPECT_TRUE(same_bytes(expected, actual)) << dtype_name(dtype);
    // Training's form carries the pre-activation through the optional fourth tensor.
    Tensor expected_pre = Tensor::zeros({7, 16}, dtype), actual_pre = Tensor::zeros({7, 16}, dtype);
    cpu->linear_gelu_forward(in, weight, bias, &expected_pre, expected);
    const Tensor loop_pre = on_loopback(actual_pre);
    adapted->linear_gelu_forward(on_loopback(in), on_loopback(weight), on_loopback(bias), &loop_pre,
                                 on_loopback(actual));
    EXPECT_EQ(cuda_module_loopback_calls(VITPIPE_OP_LINEAR_GELU_FORWARD), before + 2);
    EXPECT_TRUE(same_bytes(expected_pre, actual_pre)) << dtype_name(dtype);
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
    adapted->gelu_forward(on_loopback(in), on_loopback(out));  // the CPU backend behind the table refuses the sizes
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

namespace {

namespace oc = optimizer_cases;

std::vector<Tensor> clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.clone());
  return out;
}

// `op` on the CPU backend and through the adapter into the loopback table (one call of `code`): the same bytes in
// every tensor.
template <class Op>
void expect_carried(int code, const std::vector<Tensor>& inputs, Op op) {
  SCOPED_TRACE(backend_op_name(code));
  auto cpu = make_cpu_backend();
  auto adapted = make_cuda_module_backend(cuda_module_loopback(), 0, false);
  std::vector<Tensor> expected = clones(inputs), actual = clones(inputs);
  op(*cpu, expected);
  const long long before = cuda_module_loopback_calls(code);
  std::vector<Tensor> on_device;
  for (const Tensor& t : actual) on_device.push_back(on_loopback(t));
  op(*adapted, on_device);
  EXPECT_EQ(cuda_module_loopback_calls(code), before + 1);
  for (size_t i = 0; i < inputs.size(); ++i) EXPECT_TRUE(same_bytes(expected[i], actual[i])) << "tensor " << i;
}

}  // namespace

TEST(CudaModuleAdapter, OptimizerUpdatesAreCarriedBitForBit) {
  const std::vector<Tensor> st = oc::state(11);
  const std::vector<OptimizerRun> adamw_runs = oc::adamw_runs(), runs = oc::runs(true);
  const std::vector<int64_t> items = oc::work_items(runs.size());
  const OptimizerScalars s = oc::scalars(4);
  expect_carried(VITPIPE_OP_ADAMW_UPDATE, st, [&](Backend& b, std::vector<Tensor>& x) {
    b.adamw_update(oc::step(x[0], x[1], x[2], x[3], adamw_runs, items), s);
  });
  expect_carried(VITPIPE_OP_LAMB_UPDATE, st, [&](Backend& b, std::vector<Tensor>& x) {
    b.lamb_update(oc::step(x[0], x[1], x[2], x[3], runs, {}), s);
  });
  for (bool first : {true, false}) {
    for (bool nesterov : {false, true}) {
      const OptimizerScalars sgd = oc::scalars(2, first, nesterov);
      expect_carried(VITPIPE_OP_SGD_UPDATE, {st[0], st[1], st[2]}, [&](Backend& b, std::vector<Tensor>& x) {
        b.sgd_update(oc::step(x[0], x[1], x[2], Tensor(), runs, items), sgd);
      });
    }
  }
  expect_carried(VITPIPE_OP_SGD_UPDATE, {st[0], st[1]}, [&](Backend& b, std::vector<Tensor>& x) {
    b.sgd_update(oc::step(x[0], x[1], Tensor(), Tensor(), runs, items), s);
  });
}

TEST(CudaModuleAdapter, LambMomentsReturnTheSquaresToTheHost) {
  const std::vector<Tensor> st = oc::state(12);
  const std::vector<OptimizerRun> runs = oc::runs(true);
  std::vector<std::vector<double>> squares;
  expect_carried(VITPIPE_OP_LAMB_MOMENTS, st, [&](Backend& b, std::vector<Tensor>& x) {
    squares.emplace_back(2 * runs.size(), -1.0);
    b.lamb_moments(oc::step(x[0], x[1], x[2], x[3], runs, oc::work_items(runs.size())), oc::scalars(3), squares.back());
  });
  ASSERT_EQ(squares.size(), 2u);
  EXPECT_EQ(std::memcmp(squares[0].data(), squares[1].data(), squares[0].size() * sizeof(double)), 0);
  EXPECT_GT(squares[1][0], 0.0);
}

TEST(CudaModuleAdapter, SumsOfSquaresZeroingAndHostCopiesAreCarried) {
  const std::vector<Tensor> st = oc::state(13);
  const std::vector<int64_t> bounds = oc::bounds(oc::kElements - 3);
  std::vector<double> sums;
  expect_carried(VITPIPE_OP_SUM_OF_SQUARES, {st[0]}, [&](Backend& b, std::vector<Tensor>& x) {
    sums.push_back(b.sum_of_squares(x[0].slice(3, oc::kElements), bounds));
  });
  ASSERT_EQ(sums.size(), 2u);
  EXPECT_EQ(std::memcmp(&sums[0], &sums[1], sizeof(double)), 0);
  expect_carried(VITPIPE_OP_ZERO, {st[1]}, [](Backend& b, std::vector<Tensor>& x) { b.zero(x[0].slice(10, 500)); });
  expect_carried(VITPIPE_OP_COPY_TO_HOST, {st[0], Tensor::zeros({100})},
                 [](Backend& b, std::vector<Tensor>& x) { b.copy_to_host(x[0].slice(17, 117), x[1]); });
  expect_carried(VITPIPE_OP_COPY_FROM_HOST, {st[2], st[3]},
                 [](Backend& b, std::vector<Tensor>& x) { b.copy_from_host(x[1].slice(0, 64), x[0].slice(64, 128)); });
}

TEST(CudaModuleAdapter, HostCopiesDescribeTheirHostEndAsHostMemory) {
  const Tensor device = Tensor::zeros({4}), host = Tensor::zeros({4});
  BackendCallBuilder to_host(VITPIPE_OP_COPY_TO_HOST);
  to_host.tensor(device).host_tensor(host);
  EXPECT_EQ(to_host.call().tensors[0].memory, VITPIPE_MEMORY_DEVICE);
  EXPECT_EQ(to_host.call().tensors[1].memory, VITPIPE_MEMORY_HOST);
  // A copy whose host end is described as device memory (or the reverse), or any other op with a host tensor, is
  // refused before the backend sees it.
  const VitpipeCudaModule& m = cuda_module_loopback();
  void* instance = nullptr;
  char error[256] = {};
  ASSERT_EQ(m.backend_create(0, 0, &instance, error, sizeof error), 0) << error;
  BackendCallBuilder wrong(VITPIPE_OP_COPY_TO_HOST);
  wrong.tensor(device).tensor(host);
  EXPECT_NE(m.backend_call(instance, &wrong.call(), error, sizeof error), 0);
  EXPECT_NE(std::string(error).find("copy_to_host: tensor 1 must be host memory"), std::string::npos) << error;
  BackendCallBuilder reversed(VITPIPE_OP_COPY_FROM_HOST);
  reversed.tensor(host).host_tensor(device);
  EXPECT_NE(m.backend_call(instance, &reversed.call(), error, sizeof error), 0);
  EXPECT_NE(std::string(error).find("copy_from_host: tensor 0 must be host memory"), std::string::npos) << error;
  BackendCallBuilder zero(VITPIPE_OP_ZERO);
  zero.host_tensor(host);
  EXPECT_NE(m.backend_call(instance, &zero.call(), error, sizeof error), 0);
  EXPECT_NE(std::string(error).find("zero: tensor 0 must be device memory"), std::string::npos) << error;
  // A host array with a count but no pointer.
  BackendCallBuilder sums(VITPIPE_OP_SUM_OF_SQUARES);
  sums.tensor(device);
  sums.call().bound_count = 2;
  EXPECT_NE(m.backend_call(instance, &sums.call(), error, sizeof error), 0);
  EXPECT_NE(std::string(error).find("bounds: 2 entries at a null pointer"), std::string::npos) << error;
  m.backend_destroy(instance);
}

TEST(CudaModuleAdapter, AHostTensorHandedAsDeviceMemoryIsRefused) {
  auto adapted = make_cuda_module_backend(cuda_module_loopback(), 0, false);
  const Tensor host = Tensor::zeros({4, 8});
  const Tensor device = adapted->allocate({4, 8}, DType::f32);
  EXPECT_EQ(device.device(), Device::cuda);
  EXPECT_FALSE(adapted->host_accessible());
  const long long before = cuda_module_loopback_calls(VITPIPE_OP_GELU_FORWARD);
  try {
    adapted->gelu_forward(host, device);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("gelu_forward's tensor 1 is host memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cuda_module_loopback_calls(VITPIPE_OP_GELU_FORWARD), before);  // refused before the table
  // And the host cannot read the device tensor except through a copy.
  EXPECT_THROW(device.f32(), std::exception);
  adapted->copy_from_host(Tensor::zeros({4, 8}), device);
  EXPECT_EQ(to_host(*adapted, device).f32()[5], 0.0f);
}

TEST(CudaModuleAdapter, OptimizerStructsCrossAsCData) {
  OptimizerScalars s = oc::scalars(5, true, false);
  s.one_minus_dampening = 0.5f;
  const OptimizerScalars back = from_c(to_c(s));
  const float want[] = {s.beta1,
                        s.one_minus_beta1,
                        s.beta2,
                        s.one_minus_beta2,
                        s.bias_correction1,
                        s.bias_correction2,
                        s.bias_correction2_sqrt,
                        s.eps,
                        s.momentum,
                        s.one_minus_dampening};
  const float got[] = {back.beta1,
                       back.one_minus_beta1,
                       back.beta2,
                       back.one_minus_beta2,
                       back.bias_correction1,
                       back.bias_correction2,
                       back.bias_correction2_sqrt,
                       back.eps,
                       back.momentum,
                       back.one_minus_dampening};
  EXPECT_EQ(std::memcmp(want, got, sizeof want), 0);
  EXPECT_TRUE(back.first_step);
  EXPECT_FALSE(back.nesterov);
  const VitpipeOptimizerRun r = to_c(OptimizerRun{3, 9, 0.25f, 0.125f});
  EXPECT_EQ(r.begin, 3);
  EXPECT_EQ(r.end, 9);
  EXPECT_EQ(r.decay, 0.25f);
  EXPECT_EQ(r.step, 0.125f);
}
