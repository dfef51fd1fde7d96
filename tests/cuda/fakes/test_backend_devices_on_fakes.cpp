// Backends on two GPUs of one process (the trainer's pipeline stages as threads, each stage's backend on its own GPU):
// the CUDA runtime's current device is per host thread, so every entry into the module's table must make its
// backend's GPU current first. The fake runtime (fake_cuda_runtime.h) tracks the current device per thread and records
// each call on a stream, event, block or handle of another device; these tests use two backends alternately from one
// thread, from two threads, over NCCL, and destroy them from a third thread, and expect no such call.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/module_abi.h"
#include "backend/cuda_module_backend.h"
#include "backend/nccl_group.h"
#include "fake_cuda_runtime.h"
#include "parallel/local_communicator.h"

extern "C" const VitpipeCudaModule* vitpipe_cuda_module(void);

using namespace vitpipe;

namespace {

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

// FAKE_CUDA_DEVICES=2 for one test (the fake reads it on every call), the recorded violations cleared before.
class BackendDevicesOnFakes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* was = std::getenv("FAKE_CUDA_DEVICES")) previous_ = was;
    setenv("FAKE_CUDA_DEVICES", "2", 1);
    fake_cuda_runtime::take_device_violations();
  }
  void TearDown() override {
    if (previous_) {
      setenv("FAKE_CUDA_DEVICES", previous_->c_str(), 1);
    } else {
      unsetenv("FAKE_CUDA_DEVICES");
    }
  }
  std::optional<std::string> previous_;
};

Tensor filled(const Shape& shape, float first) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = first + 0.01f * static_cast<float>(i % 97);
  return t;
}

// Device tensors of one backend and the op sequence a stage runs on them: uploads, a GEMM whose 5-column rows are
// staged through the scratch arena, a loss read back, a deferred loss, a read-back of the logits.
struct StageWork {
  static constexpr int64_t batch = 6, labels = 5, hidden = 12;
  Backend& gpu;
  Tensor features, weight, targets, logits, grad;

  explicit StageWork(Backend& b)
      : gpu(b),
        features(b.allocate({batch, hidden}, DType::f32)),
        weight(b.allocate({labels, hidden}, DType::f32)),
        targets(b.allocate({batch, labels}, DType::f32)),
        logits(b.allocate({batch, labels}, DType::f32)),
        grad(b.allocate({batch, labels}, DType::f32)) {}

  // The loss and logits `gpu` computes; the same inputs give the same on either device.
  std::pair<double, std::vector<float>> run(float first) {
    gpu.copy_from_host(filled(features.shape(), first), features);
    gpu.copy_from_host(filled(weight.shape(), -0.2f), weight);
    gpu.copy_from_host(filled(targets.shape(), 0.0f), targets);
    gpu.linear_forward(features, weight, nullptr, nullptr, logits);
    const double loss = gpu.bce_with_logits(logits, targets, nullptr, nullptr, 1.0, grad);
    EXPECT_TRUE(defer_losses(gpu));
    EXPECT_EQ(gpu.bce_with_logits(logits, targets, nullptr, nullptr, 1.0, grad), 0.0);
    EXPECT_EQ(take_losses(gpu), loss) << "the deferred loss differs from the one read at once";
    Tensor host = Tensor::empty(logits.shape());
    gpu.copy_to_host(logits, host);
    return {loss, std::vector<float>(host.f32(), host.f32() + host.numel())};
  }
};

// backend_synchronize, which the adapter does not call, straight through the table.
void synchronize(Backend& gpu) {
  const std::optional<CudaModuleInstance> instance = cuda_module_instance(gpu);
  ASSERT_TRUE(instance.has_value());
  char error[256] = {};
  EXPECT_EQ(instance->module->backend_synchronize(instance->instance.get(), error, sizeof error), 0) << error;
}

// The expected result: the same work on a backend alone on GPU 0.
std::pair<double, std::vector<float>> alone(float first) {
  std::unique_ptr<Backend> gpu = make_cuda_module_backend(*vitpipe_cuda_module(), 0, false);
  StageWork work(*gpu);
  return work.run(first);
}

TEST_F(BackendDevicesOnFakes, TwoBackendsUsedAlternatelyFromOneThreadAndDestroyedFromAnother) {
  const auto want0 = alone(0.5f), want1 = alone(-0.25f);
  ASSERT_EQ(joined(fake_cuda_runtime::take_device_violations()), "");

  auto gpu0 = make_cuda_module_backend(*vitpipe_cuda_module(), 0, false);
  auto gpu1 = make_cuda_module_backend(*vitpipe_cuda_module(), 1, false);  // leaves GPU 1 current
  auto work0 = std::make_unique<StageWork>(*gpu0);
  auto work1 = std::make_unique<StageWork>(*gpu1);
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(work0->run(0.5f), want0);
    EXPECT_EQ(work1->run(-0.25f), want1);
    synchronize(*gpu0);  // GPU 1 current
    synchronize(*gpu1);
  }
  // Deferred losses of both, read each while the other's GPU is current.
  ASSERT_TRUE(defer_losses(*gpu0));
  EXPECT_EQ(gpu0->bce_with_logits(work0->logits, work0->targets, nullptr, nullptr, 1.0, work0->grad), 0.0);
  ASSERT_TRUE(defer_losses(*gpu1));
  EXPECT_EQ(gpu1->bce_with_logits(work1->logits, work1->targets, nullptr, nullptr, 1.0, work1->grad), 0.0);
  EXPECT_EQ(take_losses(*gpu0), want0.first);  // GPU 1 current
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(take_losses(*gpu1), want1.first);
  // A thread of its own frees both backends' tensors, leaving GPU 0 current, then destroys GPU 1's backend, then
  // GPU 0's (each destruction on a thread whose current device is the other's).
  std::thread destroyer([&] {
    work1.reset();
    work0.reset();
    gpu1.reset();
    gpu0.reset();
  });
  destroyer.join();
  EXPECT_EQ(joined(fake_cuda_runtime::take_device_violations()), "");
}

TEST_F(BackendDevicesOnFakes, TwoStageThreadsSwapBackendsAndAThirdDestroysThem) {
  const auto want0 = alone(0.5f), want1 = alone(-0.25f);
  auto gpu0 = make_cuda_module_backend(*vitpipe_cuda_module(), 0, false);
  auto gpu1 = make_cuda_module_backend(*vitpipe_cuda_module(), 1, false);
  auto work0 = std::make_unique<StageWork>(*gpu0);
  auto work1 = std::make_unique<StageWork>(*gpu1);
  // Each thread uses its own backend, then the other's (a thread's current device stays what the last call set).
  auto stage = [&](StageWork& mine, const std::pair<double, std::vector<float>>& want_mine, float mine_first,
                   StageWork& other, const std::pair<double, std::vector<float>>& want_other, float other_first) {
    for (int round = 0; round < 2; ++round) EXPECT_EQ(mine.run(mine_first), want_mine);
    EXPECT_EQ(other.run(other_first), want_other);
  };
  std::thread first([&] { stage(*work0, want0, 0.5f, *work1, want1, -0.25f); });
  first.join();  // the backends are not shared between threads at once (a stage owns its own)
  std::thread second([&] { stage(*work1, want1, -0.25f, *work0, want0, 0.5f); });
  second.join();
  std::thread destroyer([&] {
    work0.reset();
    work1.reset();  // leaves GPU 1 current
    gpu0.reset();
    gpu1.reset();
  });
  destroyer.join();
  EXPECT_EQ(joined(fake_cuda_runtime::take_device_violations()), "");
}

TEST_F(BackendDevicesOnFakes, NcclRanksOnTwoGpusAsThreads) {
  const size_t n = 1031;
  std::vector<std::unique_ptr<Backend>> backends(2);
  run_local_ranks(2, [&](Communicator& comm) {
    // Each rank's thread starts on GPU 0; rank 1's backend lives on GPU 1.
    // Before each entry the thread switches to the other GPU, as another stage's or library's call on it would.
    const int other = 1 - comm.rank();
    backends[comm.rank()] = make_cuda_module_backend(*vitpipe_cuda_module(), comm.rank(), false);
    Backend& gpu = *backends[comm.rank()];
    {
      ASSERT_EQ(cudaSetDevice(other), cudaSuccess);
      NcclGroup nccl(gpu, comm);
      Tensor host = Tensor::empty({static_cast<int64_t>(n)});
      for (size_t i = 0; i < n; ++i) host.f32()[i] = static_cast<float>(comm.rank() + 1) + static_cast<float>(i);
      const Tensor g = gpu.allocate(host.shape(), DType::f32);
      gpu.copy_from_host(host, g);
      for (int round = 0; round < 2; ++round) {
        ASSERT_EQ(cudaSetDevice(other), cudaSuccess);
        nccl.allreduce_sum(g);
        ASSERT_EQ(cudaSetDevice(other), cudaSuccess);
        while (round == 1 && !nccl.done()) {  // round 0 waits without asking first
        }
        ASSERT_EQ(cudaSetDevice(other), cudaSuccess);
        nccl.wait();
        ASSERT_EQ(cudaSetDevice(other), cudaSuccess);
        gpu.copy_to_host(g, host);
        // The ranks' 1 + i and 2 + i summed, then that sum summed again (exact in float).
        const float times = round == 0 ? 1.0f : 2.0f;
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(host.f32()[i], times * (3.0f + 2.0f * static_cast<float>(i))) << i;
      }
      ASSERT_EQ(cudaSetDevice(other), cudaSuccess);
    }
  });
  std::thread destroyer([&] { backends.clear(); });
  destroyer.join();
  EXPECT_EQ(joined(fake_cuda_runtime::take_device_violations()), "");
}

TEST_F(BackendDevicesOnFakes, ACommunicatorDestroyedThroughTheTableWhileAnotherGpuIsCurrent) {
  // NcclGroup waits (nccl_wait makes the GPU current) before nccl_comm_destroy; the table's entry alone must too.
  const VitpipeCudaModule& module = *vitpipe_cuda_module();
  auto gpu1 = make_cuda_module_backend(module, 1, false);
  const std::optional<CudaModuleInstance> instance = cuda_module_instance(*gpu1);
  ASSERT_TRUE(instance.has_value());
  char id[VITPIPE_NCCL_UNIQUE_ID_BYTES] = {};
  char error[256] = {};
  ASSERT_EQ(module.nccl_unique_id(id, error, sizeof error), 0) << error;
  void* comm = nullptr;
  ASSERT_EQ(module.nccl_comm_create(instance->instance.get(), id, 1, 0, &comm, error, sizeof error), 0) << error;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  module.nccl_comm_destroy(comm);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  gpu1.reset();
  EXPECT_EQ(joined(fake_cuda_runtime::take_device_violations()), "");
}

}  // namespace
