// CudaBackend's host waits and allocations inside a step, on the fake CUDA runtime that counts them (issue #42):
// uploads through pinned buffers with events and no stream synchronisation, the loss through pinned memory, the
// arena and cuDNN workspace growing in stream order (no cudaMalloc / cudaFree inside a step, which would synchronise
// the device under NCCL reductions in flight), and a cuBLASLt throw leaving no staged copy behind for the next op.
// The fakes run everything at once, so these prove the calls CudaBackend makes, not what a GPU does with them.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "../executors/fake_cublaslt.h"
#include "../executors/fake_cudnn.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/module_abi.h"
#include "backend/cuda_module_backend.h"
#include "fake_cuda_runtime.h"
#include "util/error.h"

extern "C" const VitpipeCudaModule* vitpipe_cuda_module(void);

using namespace vitpipe;
using vitpipe::fake_cuda_runtime::call_counts;

namespace {

// The counters' values at construction; each method gives the change since.
struct CountsSince {
  int stream_synchronizations = call_counts().stream_synchronizations;
  int event_synchronizations = call_counts().event_synchronizations;
  int device_allocations = call_counts().device_allocations;
  int device_frees = call_counts().device_frees;
  int stream_ordered_allocations = call_counts().stream_ordered_allocations;
  int stream_ordered_frees = call_counts().stream_ordered_frees;
  int pinned_allocations = call_counts().pinned_allocations;
  int pageable_uploads = call_counts().pageable_uploads;
  int pinned_uploads = call_counts().pinned_uploads;
  int pageable_readbacks = call_counts().pageable_readbacks;
  int pinned_refills_in_flight = call_counts().pinned_refills_in_flight;
};

Tensor filled(const Shape& shape, float first) {
  Tensor t = Tensor::empty(shape);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = first + 0.001f * static_cast<float>(i % 1000);
  return t;
}

Tensor to_host(cuda::CudaBackend& gpu, const Tensor& device) {
  Tensor host = Tensor::empty(device.shape(), device.dtype());
  gpu.copy_to_host(device, host);
  return host;
}

TEST(CudaBackendHostWaitsOnFakes, AMicroBatchUploadsThroughPinnedBuffersAndNeverDrainsTheStream) {
  cuda::CudaBackend gpu(0, false);
  // Images of 40 MiB (three chunks of the two 16 MiB pinned buffers), labels, a GEMM for the logits and the loss:
  // the host traffic of one training micro-batch.
  const int64_t batch = 8, labels = 14, hidden = 64;
  const Tensor images = filled({10 * (int64_t{1} << 20)}, 1.0f);  // 10 Mi floats
  const Tensor targets = filled({batch, labels}, 0.0f);
  const Tensor features = filled({batch, hidden}, -0.5f), weight = filled({labels, hidden}, 0.01f);
  const Tensor d_images = gpu.allocate(images.shape(), DType::f32),
               d_targets = gpu.allocate(targets.shape(), DType::f32);
  const Tensor d_features = gpu.allocate(features.shape(), DType::f32);
  const Tensor d_weight = gpu.allocate(weight.shape(), DType::f32);
  const Tensor d_logits = gpu.allocate({batch, labels}, DType::f32), d_grad = gpu.allocate({batch, labels}, DType::f32);
  gpu.copy_from_host(features, d_features);
  gpu.copy_from_host(weight, d_weight);

  const CountsSince before;
  double loss = 0.0;
  for (int micro_batch = 0; micro_batch < 2; ++micro_batch) {
    gpu.copy_from_host(images, d_images);
    gpu.linear_forward(d_features, d_weight, nullptr, nullptr, d_logits);
    gpu.copy_from_host(targets, d_targets);
    loss = gpu.bce_with_logits(d_logits, d_targets, nullptr, nullptr, 1.0, d_grad);
  }
  const CountsSince after;
  EXPECT_EQ(after.stream_synchronizations - before.stream_synchronizations, 0)
      << "an upload or the loss drained the stream";
  EXPECT_EQ(after.pageable_uploads - before.pageable_uploads, 0) << "an upload from pageable memory";
  EXPECT_EQ(after.pinned_uploads - before.pinned_uploads, 2 * (3 + 1));
  EXPECT_EQ(after.pageable_readbacks - before.pageable_readbacks, 0) << "the loss read into pageable memory";
  EXPECT_EQ(after.pinned_allocations - before.pinned_allocations, 0) << "pinned memory taken inside a step";
  // Each buffer is refilled only once the event recorded after its previous copy was waited for.
  EXPECT_EQ(after.pinned_refills_in_flight - before.pinned_refills_in_flight, 0)
      << "a pinned buffer refilled while its previous copy may still run";
  // Waits are for single copies: a buffer's previous chunk before refilling it, and the loss's own read-back.
  EXPECT_GT(after.event_synchronizations - before.event_synchronizations, 0);

  // The data arrived whole, across the chunk boundaries and the buffers' turns.
  const Tensor back = to_host(gpu, d_images);
  EXPECT_EQ(std::memcmp(back.raw(), images.raw(), images.nbytes()), 0);
  const Tensor back_targets = to_host(gpu, d_targets);
  EXPECT_EQ(std::memcmp(back_targets.raw(), targets.raw(), targets.nbytes()), 0);
  // And the loss equals the CPU backend's on the same logits.
  auto cpu = make_cpu_backend();
  const Tensor logits = to_host(gpu, d_logits), grad = Tensor::empty({batch, labels});
  EXPECT_DOUBLE_EQ(loss, cpu->bce_with_logits(logits, targets, nullptr, nullptr, 1.0, grad));
}

TEST(CudaBackendHostWaitsOnFakes, TheArenaGrowsInStreamOrderWithoutSynchronising) {
  cuda::CudaBackend gpu(0, false, size_t{1} << 20);  // a 1 MiB arena: the padded result below outgrows it mid-op
  const int64_t rows = 12288, k = 16, n = 14;        // 14 f32 per row: staged padded to 16 (768 KiB), twice
  const Tensor in = filled({rows, k}, 0.25f), weight = filled({n, k}, -0.125f), residual = filled({rows, n}, 2.0f);
  const Tensor d_in = gpu.allocate(in.shape(), DType::f32), d_weight = gpu.allocate(weight.shape(), DType::f32);
  const Tensor d_residual = gpu.allocate(residual.shape(), DType::f32), d_out = gpu.allocate({rows, n}, DType::f32);
  gpu.copy_from_host(in, d_in);
  gpu.copy_from_host(weight, d_weight);
  gpu.copy_from_host(residual, d_residual);

  const CountsSince before;
  gpu.linear_forward(d_in, d_weight, nullptr, &d_residual, d_out);
  gpu.zero(d_residual);
  gpu.linear_forward(d_in, d_weight, nullptr, nullptr, d_residual);  // the next op frees the outgrown block
  const CountsSince after;
  EXPECT_EQ(after.device_allocations - before.device_allocations, 0) << "cudaMalloc inside a step";
  EXPECT_EQ(after.device_frees - before.device_frees, 0) << "cudaFree inside a step";
  EXPECT_EQ(after.stream_synchronizations - before.stream_synchronizations, 0);
  EXPECT_GE(after.stream_ordered_allocations - before.stream_ordered_allocations, 1) << "the arena did not grow";
  EXPECT_GE(after.stream_ordered_frees - before.stream_ordered_frees, 1) << "the outgrown block was not freed";

  auto cpu = make_cpu_backend();
  const Tensor expected = Tensor::empty({rows, n});
  cpu->linear_forward(in, weight, nullptr, &residual, expected);
  const Tensor actual = to_host(gpu, d_out);
  for (int64_t i = 0; i < actual.numel(); ++i) ASSERT_NEAR(actual.f32()[i], expected.f32()[i], 1e-4) << i;
}

// A GPU without memory pools (cudaDevAttrMemoryPoolsSupported 0: cudaMallocAsync answers cudaErrorNotSupported):
// the backend is still created, and the arena grows through cudaMalloc, the outgrown block freed with cudaFree after
// the stream is drained (its earlier work may still read it).
TEST(CudaBackendHostWaitsOnFakes, WithoutMemoryPoolsTheArenaGrowsThroughCudaMalloc) {
  struct Restore {
    ~Restore() { fake_cuda_runtime::memory_pools_supported = true; }
  } restore;
  fake_cuda_runtime::memory_pools_supported = false;
  std::unique_ptr<cuda::CudaBackend> created;
  ASSERT_NO_THROW(created = std::make_unique<cuda::CudaBackend>(0, false, size_t{1} << 20));
  cuda::CudaBackend& gpu = *created;
  const int64_t rows = 12288, k = 16, n = 14;  // the padded result and residual outgrow the 1 MiB arena, as above
  const Tensor in = filled({rows, k}, 0.25f), weight = filled({n, k}, -0.125f), residual = filled({rows, n}, 2.0f);
  const Tensor d_in = gpu.allocate(in.shape(), DType::f32), d_weight = gpu.allocate(weight.shape(), DType::f32);
  const Tensor d_residual = gpu.allocate(residual.shape(), DType::f32);
  const Tensor d_out = gpu.allocate({rows, n}, DType::f32), d_again = gpu.allocate({rows, n}, DType::f32);
  gpu.copy_from_host(in, d_in);
  gpu.copy_from_host(weight, d_weight);
  gpu.copy_from_host(residual, d_residual);

  const CountsSince before;
  gpu.linear_forward(d_in, d_weight, nullptr, &d_residual, d_out);
  gpu.linear_forward(d_in, d_weight, nullptr, &d_residual, d_again);  // frees the outgrown block
  const CountsSince after;
  EXPECT_EQ(after.stream_ordered_allocations - before.stream_ordered_allocations, 0);
  EXPECT_GE(after.device_allocations - before.device_allocations, 1) << "the arena did not grow";
  EXPECT_GE(after.device_frees - before.device_frees, 1) << "the outgrown block was not freed";
  EXPECT_GE(after.stream_synchronizations - before.stream_synchronizations, 1) << "freed without draining the stream";

  auto cpu = make_cpu_backend();
  const Tensor expected = Tensor::empty({rows, n});
  cpu->linear_forward(in, weight, nullptr, &residual, expected);
  const Tensor actual = to_host(gpu, d_again);
  for (int64_t i = 0; i < actual.numel(); ++i) ASSERT_NEAR(actual.f32()[i], expected.f32()[i], 1e-4) << i;
}

TEST(CudaBackendHostWaitsOnFakes, TheCudnnWorkspaceGrowsInStreamOrderWithoutSynchronising) {
  struct Restore {
    ~Restore() { fake_cudnn::set_plan_workspace_bytes(0); }
  } restore;
  cuda::CudaBackend gpu(0, false);
  const int64_t batch = 1, tokens = 17, hidden = 64, heads = 4;
  const Tensor qkv = gpu.allocate({batch, tokens, 3 * hidden}, DType::bf16);
  const Tensor lse = gpu.allocate({batch, heads, tokens}, DType::f32);
  const Tensor out = gpu.allocate({batch, tokens, hidden}, DType::bf16);
  gpu.zero(qkv);
  fake_cudnn::set_plan_workspace_bytes(int64_t{100} << 20);  // past the 64 MiB taken at construction

  const CountsSince before;
  gpu.attention_forward(qkv, heads, lse, out);
  const CountsSince after;
  ASSERT_EQ(gpu.attention_path(), "cudnn");
  EXPECT_EQ(after.device_allocations - before.device_allocations, 0) << "cudaMalloc inside a step";
  EXPECT_EQ(after.device_frees - before.device_frees, 0) << "cudaFree inside a step";
  EXPECT_EQ(after.stream_synchronizations - before.stream_synchronizations, 0);
  EXPECT_EQ(after.stream_ordered_allocations - before.stream_ordered_allocations, 1);
  EXPECT_EQ(after.stream_ordered_frees - before.stream_ordered_frees, 1);
}

TEST(CudaBackendHostWaitsOnFakes, ACublasLtThrowLeavesNoStagedCopyForTheNextOp) {
  struct Restore {
    ~Restore() { fake_cublaslt::behaviour() = {}; }
  } restore;
  cuda::CudaBackend gpu(0, false);
  const int64_t rows = 64, k = 16;
  const Tensor in = filled({rows, k}, 0.5f), w14 = filled({14, k}, 0.25f), w16 = filled({16, k}, 0.125f);
  const Tensor d_in = gpu.allocate(in.shape(), DType::f32), d_w14 = gpu.allocate(w14.shape(), DType::f32);
  const Tensor d_w16 = gpu.allocate(w16.shape(), DType::f32);
  const Tensor staged_out = gpu.allocate({rows, 14}, DType::f32);  // rows of 56 bytes: staged through a padded copy
  const Tensor plain_out = gpu.allocate({rows, 16}, DType::f32);
  gpu.copy_from_host(in, d_in);
  gpu.copy_from_host(w14, d_w14);
  gpu.copy_from_host(w16, d_w16);

  fake_cublaslt::behaviour().failing_matmuls = 1;
  EXPECT_THROW(gpu.linear_forward(d_in, d_w14, nullptr, nullptr, staged_out), std::runtime_error);
  const Tensor sentinel = filled({rows, 14}, 7.0f);
  gpu.copy_from_host(sentinel, staged_out);
  // The next GEMM op stages nothing of its own; a stale entry would copy the arena over staged_out.
  gpu.linear_forward(d_in, d_w16, nullptr, nullptr, plain_out);
  const Tensor after = to_host(gpu, staged_out);
  EXPECT_EQ(std::memcmp(after.raw(), sentinel.raw(), sentinel.nbytes()), 0)
      << "the failed op's padded copy was written back by the next op";
}

TEST(CudaBackendHostWaitsOnFakes, DeferredLossesAreReadOnceAfterTheStepThroughTheModuleTable) {
  std::unique_ptr<Backend> gpu = make_cuda_module_backend(*vitpipe_cuda_module(), 0, false);
  auto cpu = make_cpu_backend();
  EXPECT_FALSE(defer_losses(*cpu)) << "the CPU's losses are read at once";
  const int64_t batch = 6, labels = 5;
  const Tensor logits = filled({batch, labels}, -0.7f), targets = filled({batch, labels}, 0.1f);
  const Tensor d_logits = gpu->allocate(logits.shape(), DType::f32),
               d_targets = gpu->allocate(targets.shape(), DType::f32);
  const Tensor d_grad = gpu->allocate(logits.shape(), DType::f32), grad = Tensor::empty(logits.shape());
  gpu->copy_from_host(logits, d_logits);
  gpu->copy_from_host(targets, d_targets);
  const double one = cpu->bce_with_logits(logits, targets, nullptr, nullptr, 1.0, grad);
  const double half = cpu->bce_with_logits(logits, targets, nullptr, nullptr, 0.5, grad);

  ASSERT_TRUE(defer_losses(*gpu));
  const CountsSince before;
  EXPECT_EQ(gpu->bce_with_logits(d_logits, d_targets, nullptr, nullptr, 1.0, d_grad), 0.0);
  EXPECT_EQ(gpu->bce_with_logits(d_logits, d_targets, nullptr, nullptr, 0.5, d_grad), 0.0);
  const CountsSince during;
  EXPECT_EQ(during.stream_synchronizations - before.stream_synchronizations, 0);
  EXPECT_EQ(during.event_synchronizations - before.event_synchronizations, 0) << "a deferred loss waited";
  EXPECT_EQ(during.pageable_readbacks - before.pageable_readbacks, 0);
  // The sums as the executor's loss_sum += each gave them, in call order from 0.0.
  double expected = 0.0;
  expected += one;
  expected += half;
  EXPECT_EQ(take_losses(*gpu), expected);
  const CountsSince after;
  EXPECT_EQ(after.event_synchronizations - during.event_synchronizations, 1) << "one wait for the step's losses";
  // The deferral ended: the next loss is read at once.
  EXPECT_EQ(gpu->bce_with_logits(d_logits, d_targets, nullptr, nullptr, 1.0, d_grad), one);
  EXPECT_EQ(take_losses(*gpu), 0.0);

  // A deferred cross-entropy's target out of range is reported when the losses are read.
  const Tensor ids = Tensor::empty({batch}, DType::i64);
  for (int64_t i = 0; i < batch; ++i) static_cast<int64_t*>(ids.raw())[i] = i == 4 ? labels : i % labels;
  const Tensor d_ids = gpu->allocate(ids.shape(), DType::i64);
  gpu->copy_from_host(ids, d_ids);
  ASSERT_TRUE(defer_losses(*gpu));
  EXPECT_EQ(gpu->cross_entropy(d_logits, d_ids, 1.0, d_grad), 0.0);
  try {
    take_losses(*gpu);
    FAIL() << "a bad target went unreported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 4 is outside [0, 5)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gpu->cross_entropy(d_logits, d_ids, 1.0, d_grad), Error) << "read at once again, and refused";
}

}  // namespace
