// backend/nccl_group.h over the loopback table (backend/cuda_module_loopback.h): ranks are threads of the local world
// (parallel/local_communicator.h), each with its own module backend whose "device memory" is host memory the host
// may not touch (Device::cuda tensors, filled and read through the backend's copies). The unique id travels over the
// Communicator; all-reduce, reduce, broadcast and send/recv through the table's nccl_* entries give the exact sums
// (in double, in rank order, rounded once) and copies; calls are asynchronous until wait(); host tensors, other
// dtypes and other backends are refused. The same code on real NCCL: tests/cuda/gpu/test_nccl_gpu.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda_module_backend.h"
#include "backend/cuda_module_loopback.h"
#include "backend/nccl_group.h"
#include "model/parameter_layout.h"
#include "parallel/gradient_buckets.h"
#include "parallel/local_communicator.h"
#include "parallel/parameter_gather.h"
#include "parallel/trace.h"
#include "util/random.h"

using namespace vitpipe;

namespace {

std::unique_ptr<Backend> loopback() { return make_cuda_module_backend(cuda_module_loopback(), 0, false); }

std::vector<float> values(int rank, int64_t n) {
  Rng rng(1000 + static_cast<uint64_t>(rank));
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.normal()) * 3.0f;
  return v;
}

Tensor on_device(Backend& b, const std::vector<float>& v) {
  Tensor host = Tensor::empty({static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), host.f32());
  Tensor device = b.allocate(host.shape(), DType::f32);
  b.copy_from_host(host, device);
  return device;
}

std::vector<float> read_back(Backend& b, const Tensor& device) {
  Tensor host = Tensor::empty(device.shape(), device.dtype());
  b.copy_to_host(device, host);
  return std::vector<float>(host.f32(), host.f32() + host.numel());
}

// The sum of every rank's values, in double in rank order, rounded once.
std::vector<float> exact_sum(int ranks, int64_t n) {
  std::vector<double> sum(static_cast<size_t>(n), 0.0);
  for (int r = 0; r < ranks; ++r) {
    const std::vector<float> v = values(r, n);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += v[i];
  }
  return std::vector<float>(sum.begin(), sum.end());
}

class NcclGroupOnLoopback : public ::testing::TestWithParam<int> {};

TEST_P(NcclGroupOnLoopback, AllReducesDeviceTensorsToTheExactSum) {
  const int ranks = GetParam();
  const int64_t n = 10007;
  const long long groups_before = cuda_module_loopback_nccl_groups();
  run_local_ranks(ranks, [&](Communicator& comm) {
    std::unique_ptr<Backend> backend = loopback();
    NcclGroup nccl(*backend, comm);
    EXPECT_EQ(nccl.rank(), comm.rank());
    EXPECT_EQ(nccl.size(), ranks);
    const Tensor g = on_device(*backend, values(comm.rank(), n));
    ASSERT_EQ(g.device(), Device::cuda);
    nccl.allreduce_sum(g);
    nccl.wait();
    EXPECT_TRUE(nccl.done());
    EXPECT_EQ(read_back(*backend, g), exact_sum(ranks, n));
  });
  EXPECT_EQ(cuda_module_loopback_nccl_groups() - groups_before, ranks);
}

TEST_P(NcclGroupOnLoopback, ReducesToARootAndBroadcastsFromOne) {
  const int ranks = GetParam();
  const int64_t n = 513;
  run_local_ranks(ranks, [&](Communicator& comm) {
    std::unique_ptr<Backend> backend = loopback();
    NcclGroup nccl(*backend, comm);
    const int root = ranks - 1;
    const Tensor g = on_device(*backend, values(comm.rank(), n));
    nccl.reduce_sum(g, root);
    nccl.wait();
    EXPECT_EQ(read_back(*backend, g), comm.rank() == root ? exact_sum(ranks, n) : values(comm.rank(), n));
    // bf16 broadcast from rank 0.
    Tensor host = Tensor::empty({n}, DType::bf16);
    for (int64_t i = 0; i < n; ++i) host.u16()[i] = static_cast<uint16_t>(comm.rank() * 1000 + i);
    Tensor b = backend->allocate({n}, DType::bf16);
    backend->copy_from_host(host, b);
    nccl.broadcast(b, 0);
    nccl.wait();
    backend->copy_to_host(b, host);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(host.u16()[i], static_cast<uint16_t>(i));
  });
}

TEST_P(NcclGroupOnLoopback, SendsAndReceivesAroundARingInOneGroup) {
  const int ranks = GetParam();
  const int64_t n = 300;
  run_local_ranks(ranks, [&](Communicator& comm) {
    std::unique_ptr<Backend> backend = loopback();
    NcclGroup nccl(*backend, comm);
    const int r = comm.rank(), next = (r + 1) % ranks, previous = (r + ranks - 1) % ranks;
    const Tensor out = on_device(*backend, values(r, n));
    const Tensor in = backend->allocate({n}, DType::f32);
    nccl.begin_group();
    nccl.send(out, next);
    nccl.recv(in, previous);
    nccl.end_group();
    nccl.wait();
    EXPECT_EQ(read_back(*backend, in), values(previous, n));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, NcclGroupOnLoopback, ::testing::Values(2, 3));

TEST(NcclGroupOnLoopbackTwoRanks, PipelineStagesSendActivationsForwardAndGradientsBack) {
  const int64_t n = 96;
  run_local_ranks(2, [&](Communicator& comm) {
    std::unique_ptr<Backend> backend = loopback();
    NcclGroup nccl(*backend, comm);
    const Tensor activations =
        comm.rank() == 0 ? on_device(*backend, values(7, n)) : backend->allocate({n}, DType::f32);
    const Tensor gradients = comm.rank() == 1 ? on_device(*backend, values(8, n)) : backend->allocate({n}, DType::f32);
    if (comm.rank() == 0) {
      nccl.send(activations, 1);
      nccl.recv(gradients, 1);
    } else {
      nccl.recv(activations, 0);
      nccl.send(gradients, 0);
    }
    nccl.wait();
    EXPECT_EQ(read_back(*backend, activations), values(7, n));
    EXPECT_EQ(read_back(*backend, gradients), values(8, n));
  });
}

TEST(NcclGroupOnLoopbackTwoRanks, CallsReturnBeforeThePeerArrivesAndFinishAtWait) {
  run_local_ranks(2, [&](Communicator& comm) {
    std::unique_ptr<Backend> backend = loopback();
    NcclGroup nccl(*backend, comm);
    const Tensor g = on_device(*backend, values(comm.rank(), 64));
    if (comm.rank() == 0) {
      nccl.allreduce_sum(g);  // returns although rank 1 has not issued its all-reduce yet
      EXPECT_FALSE(nccl.done());
      comm.barrier();
    } else {
      comm.barrier();
      nccl.allreduce_sum(g);
    }
    nccl.wait();
    EXPECT_TRUE(nccl.done());
    EXPECT_EQ(read_back(*backend, g), exact_sum(2, 64));
  });
}

TEST(NcclGroupOnLoopbackTwoRanks, RanksThatDisagreeFailAtWait) {
  run_local_ranks(2, [&](Communicator& comm) {
    std::unique_ptr<Backend> backend = loopback();
    NcclGroup nccl(*backend, comm);
    const Tensor g = on_device(*backend, values(comm.rank(), 10 + comm.rank()));
    nccl.allreduce_sum(g);
    try {
      nccl.wait();
      ADD_FAILURE() << "a mismatched all-reduce finished";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("meets"), std::string::npos) << e.what();
    }
  });
}

// The loopback table has no nccl_join (module table version 9): point-to-point stays on the backend's stream, and
// asking for the communication stream or a join says why instead of running unordered.
TEST(NcclGroupOnLoopbackTwoRanks, WithoutNcclJoinPointToPointStaysOnTheBackendsStream) {
  run_local_ranks(2, [&](Communicator& comm) {
    std::unique_ptr<Backend> backend = loopback();
    NcclGroup nccl(*backend, comm);
    EXPECT_FALSE(nccl.can_join());
    nccl.set_point_to_point_on_communication_stream(false);
    try {
      nccl.set_point_to_point_on_communication_stream(true);
      ADD_FAILURE() << "the communication stream was taken without nccl_join";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("nccl_join"), std::string::npos) << e.what();
    }
    EXPECT_THROW(nccl.join(), Error);
  });
}

TEST(NcclGroupOnLoopbackTwoRanks, RefusesHostTensorsOtherDtypesAndOtherBackends) {
  run_local_ranks(2, [&](Communicator& comm) {
    std::unique_ptr<Backend> backend = loopback();
    NcclGroup nccl(*backend, comm);
    const Tensor host = Tensor::zeros({4});
    for (auto call :
         {+[](NcclGroup&g, const Tensor&t) { g.allreduce_sum(t); },
          +[](NcclGroup&g, const Tensor&t) { g.reduce_sum(t, 0); },
          +[](NcclGroup&g, const Tensor&t) { g.broadcast(t, 0); }, +[](NcclGroup&g, const Tensor&t) { g.send(t, 1); },
          +[](NcclGroup&g, const Tensor&t) { g.recv(t, 1); }}) {
      try {
        call(nccl, host);
        ADD_FAILURE() << "a host tensor was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("a host tensor"), std::string::npos) << e.what();
      }
    }
    const Tensor bf16 = backend->allocate({4}, DType::bf16);
    EXPECT_THROW(nccl.allreduce_sum(bf16), Error);
    EXPECT_THROW(nccl.send(backend->allocate({4}, DType::f32), 2), Error);  // no rank 2
    EXPECT_TRUE(nccl.done());                                               // nothing was issued
    // The CPU backend has no NCCL: refused before any collective, on every rank alike.
    std::unique_ptr<Backend> cpu = make_cpu_backend();
    try {
      NcclGroup refused(*cpu, comm);
      ADD_FAILURE() << "NCCL on the CPU backend";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("needs the CUDA module's backend"), std::string::npos) << e.what();
    }
  });
}

// The gradient buckets on device memory with an NcclGroup per chunk (what the executor builds for --device cuda):
// every bucket reduced through NCCL, none through MPI or a host mirror; the replicas' mean gradient, step after step;
// sharded, each bucket summed into its owner.
std::shared_ptr<const ParameterLayout> tiny_layout() {
  ViTConfig config;
  config.hidden_size = 16;
  config.num_hidden_layers = 3;
  config.num_attention_heads = 2;
  config.intermediate_size = 32;
  config.image_size = 8;
  config.patch_size = 4;
  config.labels = {"a", "b", "c"};
  return std::make_shared<const ParameterLayout>(config);
}

TEST(GradientBucketsOnNccl, ReplicasReduceDeviceGradientsThroughNccl) {
  const int replicas = 3;
  auto layout = tiny_layout();
  const int last = layout->num_segments() - 1;
  for (bool sharded : {false, true}) {
    SCOPED_TRACE(sharded ? "sharded" : "all-reduce");
    run_local_ranks(replicas, [&](Communicator& comm) {
      std::unique_ptr<Backend> backend = loopback();
      NcclGroup nccl(*backend, comm);
      FlatParameters grads(layout, 0, last, backend.get());
      ASSERT_EQ(grads.flat().device(), Device::cuda);
      TraceRecorder trace(true, comm.rank());
      GradientBucketOptions options;
      options.bucket_bytes = 2000;
      options.scale = 1.0f / replicas;
      options.backends = {backend.get()};
      options.nccl = {&nccl};
      std::vector<ElementRange> shards;
      if (sharded) {
        const int64_t n = grads.numel(), per = (n + replicas - 1) / replicas;
        for (int r = 0; r < replicas; ++r) shards.push_back({std::min(n, r * per), std::min(n, (r + 1) * per)});
        options.shards = {shards};
      }
      GradientBuckets buckets({grads}, &comm, options, &trace);
      ASSERT_GT(buckets.buckets().size(), 2u);
      for (int step = 0; step < 2; ++step) {
        std::vector<float> mine(static_cast<size_t>(grads.numel()));
        for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>((comm.rank() + 1) * (i % 7) + step);
        backend->copy_from_host(Tensor::wrap(mine.data(), grads.flat().shape(), DType::f32), grads.flat());
        for (int s = last; s >= 0; --s) {
          buckets.mark_ready(s);
          buckets.poll();
        }
        buckets.finish();
        const std::vector<float> got = read_back(*backend, grads.flat());
        for (const GradientBucket& bucket : buckets.buckets()) {
          if (bucket.owner >= 0 && bucket.owner != comm.rank()) continue;  // left unreduced on the others
          for (int64_t i = bucket.begin; i < bucket.end; ++i) {
            const float expected = (1.0f + 2.0f + 3.0f) * static_cast<float>(i % 7) / 3.0f + static_cast<float>(step);
            ASSERT_NEAR(got[static_cast<size_t>(i)], expected, 1e-5f * (1.0f + std::abs(expected)))
                << "rank " << comm.rank() << " step " << step << " element " << i;
          }
        }
      }
      int reductions = 0;
      for (const auto& e : trace.events()) reductions += e.name == (sharded ? "reduce-scatter" : "allreduce") ? 1 : 0;
      EXPECT_EQ(reductions, 2 * static_cast<int>(buckets.buckets().size()));
    });
  }
}

// The sharded optimizer's parameter all-gather on device memory (what the executor builds for --device cuda with
// --shard-optimizer): each bucket broadcast from its owner through NCCL, so that after every segment was waited for
// each replica holds every owner's values; none of it through MPI. Twice, as in consecutive steps.
TEST(ParameterGatherOnNccl, EveryReplicaEndsWithEachOwnersValues) {
  const int replicas = 3;
  auto layout = tiny_layout();
  const int last = layout->num_segments() - 1;
  run_local_ranks(replicas, [&](Communicator& comm) {
    std::unique_ptr<Backend> backend = loopback();
    NcclGroup nccl(*backend, comm);
    FlatParameters params(layout, 0, last, backend.get());
    ASSERT_EQ(params.flat().device(), Device::cuda);
    const int64_t n = params.numel(), per = (n + replicas - 1) / replicas;
    GradientBucketOptions options;
    options.bucket_bytes = 2000;
    options.backends = {backend.get()};
    options.nccl = {&nccl};
    std::vector<ElementRange> shards;
    for (int r = 0; r < replicas; ++r) shards.push_back({std::min(n, r * per), std::min(n, (r + 1) * per)});
    options.shards = {shards};
    GradientBuckets buckets({FlatParameters(layout, 0, last, backend.get())}, &comm, options);
    ASSERT_GT(buckets.buckets().size(), 3u);
    TraceRecorder trace(true, comm.rank());
    ParameterGather gather({params}, buckets.buckets(), &comm, &trace, 100, {&nccl});
    for (int step = 0; step < 2; ++step) {
      // Each rank's own buckets hold the updated values; the rest is stale (-1) until the gather.
      std::vector<float> mine(static_cast<size_t>(n), -1.0f);
      for (const GradientBucket& bucket : buckets.buckets()) {
        if (bucket.owner != comm.rank()) continue;
        for (int64_t i = bucket.begin; i < bucket.end; ++i) {
          mine[static_cast<size_t>(i)] = static_cast<float>(10 * bucket.owner + i % 5 + step);
        }
      }
      backend->copy_from_host(Tensor::wrap(mine.data(), params.flat().shape(), DType::f32), params.flat());
      gather.start();
      EXPECT_TRUE(gather.in_flight());
      for (int s = 0; s <= last; ++s) EXPECT_TRUE(gather.wait_segment(0, s)) << "segment " << s;
      EXPECT_FALSE(gather.in_flight());
      const std::vector<float> got = read_back(*backend, params.flat());
      for (const GradientBucket& bucket : buckets.buckets()) {
        for (int64_t i = bucket.begin; i < bucket.end; ++i) {
          ASSERT_EQ(got[static_cast<size_t>(i)], static_cast<float>(10 * bucket.owner + i % 5 + step))
              << "rank " << comm.rank() << " step " << step << " element " << i << " (owner " << bucket.owner << ")";
        }
      }
    }
    int gathers = 0;
    for (const auto& e : trace.events()) gathers += e.name == "all-gather" ? 1 : 0;
    EXPECT_EQ(gathers, 2 * static_cast<int>(buckets.buckets().size()));
  });
}

// Device parameters and more than one replica but no device collectives: refused (MPI would read device memory).
TEST(ParameterGatherOnNccl, DeviceParametersWithoutNcclAreRefused) {
  auto layout = tiny_layout();
  const int last = layout->num_segments() - 1;
  run_local_ranks(2, [&](Communicator& comm) {
    std::unique_ptr<Backend> backend = loopback();
    FlatParameters params(layout, 0, last, backend.get());
    GradientBucket bucket;
    bucket.chunk = 0;
    bucket.begin = 0;
    bucket.end = params.numel();
    bucket.first_segment = 0;
    bucket.last_segment = last;
    bucket.owner = 0;
    try {
      ParameterGather gather({params}, {bucket}, &comm);
      ADD_FAILURE() << "a gather of device memory over MPI";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no device collectives"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
