// NcclExecutor (src/backend/cuda/nccl_executor.cpp) on real NCCL and GPUs, over CudaBackend's device memory: with one
// GPU a communicator of one rank (all-reduce, reduce and broadcast leave the data as it is; a grouped send to itself
// and recv from itself copies it; the communication stream runs after the compute stream's work), with more GPUs one
// rank per GPU as threads (sums of integers, exact in any order). Every test skips where the runtime sees no GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/calls/nccl_calls.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/nccl_executor.h"

using namespace vitpipe;

namespace {

int gpus() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

Tensor on_device(cuda::CudaBackend& b, const std::vector<float>& v) {
  Tensor host = Tensor::empty({static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), host.f32());
  Tensor device = b.allocate(host.shape(), DType::f32);
  b.copy_from_host(host, device);
  return device;
}

std::vector<float> to_host(cuda::CudaBackend& b, const Tensor& device) {
  Tensor host = Tensor::empty(device.shape(), DType::f32);
  b.copy_to_host(device, host);
  return std::vector<float>(host.f32(), host.f32() + host.numel());
}

std::vector<float> integers(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 4096));
  return v;
}

TEST(NcclOnGpu, OneRankRunsEveryCallOnItsOwnStream) {
  if (gpus() < 1) GTEST_SKIP() << "no GPU: the CUDA runtime sees none";
  cuda::CudaBackend backend(0, false);
  cuda::NcclExecutor ex(cuda::NcclExecutor::unique_id(), 1, 0, 0);
  const size_t n = (1u << 20) + 3;
  const std::vector<float> v = integers(0, n);
  const Tensor a = on_device(backend, v);
  // Scaled on the compute stream just before: the all-reduce on the communication stream must see the result.
  backend.scale(a, 2.0, a);
  ex.enqueue(cuda::all_reduce_gradients(static_cast<float*>(a.raw()), n), backend.stream());
  ex.wait();
  std::vector<float> doubled(v);
  for (float& x : doubled) x *= 2.0f;
  EXPECT_EQ(to_host(backend, a), doubled);

  const std::vector<cuda::Shard> shards = {{0, static_cast<int64_t>(n)}};
  ex.enqueue(cuda::reduce_gradient_shards(static_cast<float*>(a.raw()), 0, shards), backend.stream());
  ex.enqueue(cuda::broadcast_parameter_shards(static_cast<float*>(a.raw()), 0, shards), backend.stream());
  ex.wait();
  EXPECT_EQ(to_host(backend, a), doubled);

  const Tensor c = backend.allocate({static_cast<int64_t>(n)}, DType::f32);
  backend.zero(c);
  cuda::NcclGroup g = cuda::send_activations({a.raw(), 1, static_cast<int64_t>(n)}, 0);
  g.calls.push_back(cuda::recv_activations({c.raw(), 1, static_cast<int64_t>(n)}, 0).calls[0]);
  ex.enqueue(g, backend.stream());
  ex.wait();
  EXPECT_TRUE(ex.query());
  EXPECT_EQ(to_host(backend, c), doubled);
}

TEST(NcclOnGpu, OneRankPerGpuAllReducesAndExchanges) {
  const int ranks = std::min(gpus(), 8);
  if (ranks < 2) GTEST_SKIP() << "needs 2 GPUs, the CUDA runtime sees " << ranks;
  const ncclUniqueId id = cuda::NcclExecutor::unique_id();
  const size_t n = 1u << 22;
  std::vector<std::string> failures(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        cuda::CudaBackend backend(r, false);
        cuda::NcclExecutor ex(id, ranks, r, r);
        const Tensor g = on_device(backend, integers(r, n));
        ex.enqueue(cuda::all_reduce_gradients(static_cast<float*>(g.raw()), n), backend.stream());
        ex.wait();
        const std::vector<float> got = to_host(backend, g);
        for (size_t i = 0; i < n; ++i) {
          float want = 0.0f;
          for (int q = 0; q < ranks; ++q) want += static_cast<float>((q + 1) * 1000 + static_cast<int>(i % 4096));
          if (got[i] != want) throw std::runtime_error("all-reduce element " + std::to_string(i));
        }
        // A ring: send to the next rank, receive from the previous, in one group.
        const Tensor out = on_device(backend, integers(r, 4096));
        const Tensor in = backend.allocate({4096}, DType::f32);
        cuda::NcclGroup ring = cuda::send_activations({out.raw(), 1, 4096}, (r + 1) % ranks);
        ring.calls.push_back(cuda::recv_activations({in.raw(), 1, 4096}, (r + ranks - 1) % ranks).calls[0]);
        ex.enqueue(ring, backend.stream());
        ex.wait();
        if (to_host(backend, in) != integers((r + ranks - 1) % ranks, 4096)) throw std::runtime_error("ring");
      } catch (const std::exception& e) {
        failures[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(failures[static_cast<size_t>(r)], "") << "rank " << r;
}

}  // namespace
