// The CUDA module's NcclExecutor (src/backend/cuda/nccl_executor.cpp) compiled against a fake NCCL (fake_nccl.cpp:
// host memory, ranks as threads, every call recorded) and the fake CUDA runtime's streams and events: each NcclCall
// becomes the right NCCL call with the right arguments (buffers, count, datatype, ncclSum, peer or root, the
// communicator, the stream its NcclStream names), every group is bracketed by ncclGroupStart / ncclGroupEnd, the
// communication stream waits for an event recorded on the compute stream first, and failures (a call, the group's
// end, the communicator's creation, an asynchronous error, ranks that disagree) throw with NCCL's message. What real
// NCCL does with the calls is left to tests/cuda/gpu/test_nccl_gpu.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../fakes/fake_cuda_runtime.h"
#include "backend/cuda/calls/nccl_calls.h"
#include "backend/cuda/nccl_executor.h"
#include "fake_nccl.h"

using namespace vitpipe;
using fake_cuda_runtime::StreamEvent;
using fake_nccl::Record;

namespace {

// fn(rank, executor, compute stream) on `ranks` threads, one communicator of that many ranks.
void run_ranks(int ranks, const std::function<void(int, cuda::NcclExecutor&, cudaStream_t)>& fn) {
  const ncclUniqueId id = cuda::NcclExecutor::unique_id();
  std::vector<std::thread> threads;
  std::vector<std::string> failures(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        cudaStream_t compute = nullptr;
        cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking);
        cuda::NcclExecutor executor(id, ranks, r, 0);
        fake_nccl::take_records();
        fake_cuda_runtime::take_stream_events();
        fn(r, executor, compute);
      } catch (const std::exception& e) {
        failures[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(failures[static_cast<size_t>(r)], "") << "rank " << r;
}

std::vector<std::string> functions(const std::vector<Record>& records) {
  std::vector<std::string> names;
  for (const Record& r : records) names.push_back(r.function);
  return names;
}

using Names = std::vector<std::string>;

TEST(NcclExecutorOnFakeNccl, AllReduceIsOneBracketedCallOnTheCommunicationStreamAfterTheComputeStream) {
  for (int ranks : {2, 3}) {
    run_ranks(ranks, [&](int rank, cuda::NcclExecutor& ex, cudaStream_t compute) {
      std::vector<float> g(1000);
      for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((rank + 1) * 1000 + static_cast<int>(i));
      ex.enqueue(cuda::all_reduce_gradients(g.data(), g.size()), compute);
      ex.wait();
      const std::vector<Record> records = fake_nccl::take_records();
      ASSERT_EQ(functions(records), (Names{"ncclGroupStart", "ncclAllReduce", "ncclGroupEnd"}));
      const Record& c = records[1];
      EXPECT_EQ(c.send, g.data());
      EXPECT_EQ(c.recv, g.data());
      EXPECT_EQ(c.count, g.size());
      EXPECT_EQ(c.type, ncclFloat32);
      EXPECT_EQ(c.op, ncclSum);
      EXPECT_EQ(c.comm, ex.comm());
      EXPECT_EQ(c.stream, ex.stream());
      EXPECT_NE(ex.stream(), compute);
      const std::vector<StreamEvent> events = fake_cuda_runtime::take_stream_events();
      ASSERT_EQ(events.size(), 3u);
      EXPECT_EQ(events[0].kind, StreamEvent::record);
      EXPECT_EQ(events[0].stream, compute);
      EXPECT_EQ(events[1].kind, StreamEvent::wait);
      EXPECT_EQ(events[1].stream, ex.stream());
      EXPECT_EQ(events[1].event, events[0].event);
      EXPECT_EQ(events[2].kind, StreamEvent::record);
      EXPECT_EQ(events[2].stream, ex.stream());
      const int sum_of_ranks = ranks * (ranks + 1) / 2;
      for (size_t i = 0; i < g.size(); ++i) {
        ASSERT_EQ(g[i], static_cast<float>(sum_of_ranks * 1000 + ranks * static_cast<int>(i))) << i;
      }
      EXPECT_TRUE(ex.query());
      // join: the compute stream waits for the communication stream's last event, on the device.
      ex.join(compute);
      EXPECT_EQ(fake_cuda_runtime::take_stream_events().size(), 0u);  // nothing pending after wait()
    });
  }
}

TEST(NcclExecutorOnFakeNccl, ActivationsGoOnTheComputeStreamAsBf16SendRecvPairs) {
  run_ranks(2, [&](int rank, cuda::NcclExecutor& ex, cudaStream_t compute) {
    std::vector<uint16_t> a(6 * 5);
    for (size_t i = 0; i < a.size(); ++i) a[i] = rank == 0 ? static_cast<uint16_t>(0x3f80 + i) : 0;
    const cuda::RowMajorMatrix m{a.data(), 6, 5, cuda::ElementType::bf16};
    ex.enqueue(rank == 0 ? cuda::send_activations(m, 1) : cuda::recv_activations(m, 0), compute);
    ex.wait();
    const std::vector<Record> records = fake_nccl::take_records();
    ASSERT_EQ(functions(records), (Names{"ncclGroupStart", rank == 0 ? "ncclSend" : "ncclRecv", "ncclGroupEnd"}));
    const Record& c = records[1];
    EXPECT_EQ(rank == 0 ? c.send : c.recv, a.data());
    EXPECT_EQ(c.count, 30u);
    EXPECT_EQ(c.type, ncclBfloat16);
    EXPECT_EQ(c.peer, 1 - rank);
    EXPECT_EQ(c.stream, compute);
    // No cross-stream wait: only the compute stream's completion event.
    const std::vector<StreamEvent> events = fake_cuda_runtime::take_stream_events();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].kind, StreamEvent::record);
    EXPECT_EQ(events[0].stream, compute);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], static_cast<uint16_t>(0x3f80 + i));
  });
}

TEST(NcclExecutorOnFakeNccl, ShardedReductionAndBroadcastAreGroupedRootedCalls) {
  const std::vector<cuda::Shard> shards = {{10, 17}, {17, 25}, {25, 30}};  // unequal, as vitpipe's are
  run_ranks(3, [&](int rank, cuda::NcclExecutor& ex, cudaStream_t compute) {
    std::vector<float> range(20);  // offsets [10, 30)
    for (size_t i = 0; i < range.size(); ++i) range[i] = static_cast<float>((rank + 1) * 100 + static_cast<int>(i));
    ex.enqueue(cuda::reduce_gradient_shards(range.data(), 10, shards), compute);
    ex.wait();
    std::vector<Record> records = fake_nccl::take_records();
    ASSERT_EQ(functions(records), (Names{"ncclGroupStart", "ncclReduce", "ncclReduce", "ncclReduce", "ncclGroupEnd"}));
    for (int s = 0; s < 3; ++s) {
      const Record& c = records[static_cast<size_t>(s) + 1];
      EXPECT_EQ(c.peer, s);
      EXPECT_EQ(c.send, range.data() + (shards[s].begin - 10));
      EXPECT_EQ(c.recv, c.send);
      EXPECT_EQ(c.count, static_cast<size_t>(shards[s].end - shards[s].begin));
      EXPECT_EQ(c.op, ncclSum);
      EXPECT_EQ(c.stream, ex.stream());
    }
    // Rank r holds the sum of its own shard (600 + 3 i), elsewhere its own values.
    for (int64_t i = 0; i < 20; ++i) {
      const bool own = 10 + i >= shards[rank].begin && 10 + i < shards[rank].end;
      ASSERT_EQ(range[i], static_cast<float>(own ? 600 + 3 * i : (rank + 1) * 100 + i)) << i;
    }
    // The owners' shards go back to every rank.
    ex.enqueue(cuda::broadcast_parameter_shards(range.data(), 10, shards), compute);
    ex.wait();
    records = fake_nccl::take_records();
    ASSERT_EQ(functions(records),
              (Names{"ncclGroupStart", "ncclBroadcast", "ncclBroadcast", "ncclBroadcast", "ncclGroupEnd"}));
    for (int s = 0; s < 3; ++s) EXPECT_EQ(records[static_cast<size_t>(s) + 1].peer, s);
    for (int64_t i = 0; i < 20; ++i) ASSERT_EQ(range[i], static_cast<float>(600 + 3 * i)) << i;
  });
}

TEST(NcclExecutorOnFakeNccl, ReduceScatterTakesTheCountPerRank) {
  const std::vector<cuda::Shard> shards = {{0, 4}, {4, 8}};
  run_ranks(2, [&](int rank, cuda::NcclExecutor& ex, cudaStream_t compute) {
    std::vector<float> range(8);
    for (size_t i = 0; i < 8; ++i) range[i] = static_cast<float>(rank * 10 + static_cast<int>(i));
    ex.enqueue(cuda::reduce_scatter_gradients(range.data(), 0, shards, rank), compute);
    ex.wait();
    const std::vector<Record> records = fake_nccl::take_records();
    ASSERT_EQ(functions(records), (Names{"ncclGroupStart", "ncclReduceScatter", "ncclGroupEnd"}));
    EXPECT_EQ(records[1].count, 4u);
    EXPECT_EQ(records[1].send, range.data());
    EXPECT_EQ(records[1].recv, range.data() + rank * 4);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(range[rank * 4 + i], static_cast<float>(10 + 2 * (rank * 4 + i)));
  });
}

TEST(NcclExecutorOnFakeNccl, TwoStagesExchangingAtOnceGroupTheirSendAndRecv) {
  run_ranks(2, [&](int rank, cuda::NcclExecutor& ex, cudaStream_t compute) {
    std::vector<float> out(8, static_cast<float>(rank + 1)), in(8, 0.0f);
    cuda::NcclGroup g = cuda::send_activations({out.data(), 2, 4}, 1 - rank);
    g.calls.push_back(cuda::recv_activations({in.data(), 2, 4}, 1 - rank).calls[0]);
    ex.enqueue(g, compute);
    ex.wait();
    EXPECT_EQ(functions(fake_nccl::take_records()), (Names{"ncclGroupStart", "ncclSend", "ncclRecv", "ncclGroupEnd"}));
    for (float v : in) ASSERT_EQ(v, static_cast<float>(2 - rank));
  });
}

TEST(NcclExecutorOnFakeNccl, RanksThatDisagreeFailWithNcclsMessage) {
  run_ranks(2, [&](int rank, cuda::NcclExecutor& ex, cudaStream_t compute) {
    std::vector<float> g(static_cast<size_t>(4 + rank), 1.0f);
    try {
      ex.enqueue(cuda::all_reduce_gradients(g.data(), g.size()), compute);
      ADD_FAILURE() << "rank " << rank << ": a mismatched all-reduce ran";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("ncclGroupEnd"), std::string::npos) << what;
      EXPECT_NE(what.find("invalid usage (fake)"), std::string::npos) << what;
      EXPECT_NE(what.find("meets"), std::string::npos) << what;  // the interpreter's reason, via ncclGetLastError
    }
  });
}

TEST(NcclExecutorOnFakeNccl, FailuresNameTheCallAndNcclsMessage) {
  {
    fake_nccl::fail_next(ncclSystemError, "socket gone");
    ncclUniqueId id{};
    try {
      cuda::NcclExecutor::unique_id();
      ADD_FAILURE() << "no failure";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("ncclGetUniqueId failed: unhandled system error (fake)"), std::string::npos)
          << e.what();
    }
    id = cuda::NcclExecutor::unique_id();
    fake_nccl::fail_next(ncclInvalidArgument, "");
    try {
      cuda::NcclExecutor ex(id, 1, 0, 0);
      ADD_FAILURE() << "no failure";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("ncclCommInitRank (rank 0 of 1, GPU 0) failed: invalid argument (fake)"),
                std::string::npos)
          << e.what();
    }
  }
  const ncclUniqueId id = cuda::NcclExecutor::unique_id();
  cudaStream_t compute = nullptr;
  cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking);
  std::vector<float> g(16, 2.0f);
  {
    cuda::NcclExecutor ex(id, 1, 0, 0);
    fake_nccl::take_records();
    fake_nccl::fail_next(ncclInvalidUsage, "planted");
    try {
      ex.enqueue(cuda::all_reduce_gradients(g.data(), g.size()), compute);
      ADD_FAILURE() << "no failure";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("all_reduce 16 x f32"), std::string::npos) << what;
      EXPECT_NE(what.find("ncclAllReduce failed: invalid usage (fake) (planted)"), std::string::npos) << what;
    }
    // The group was closed after the failed call.
    EXPECT_EQ(functions(fake_nccl::take_records()), (Names{"ncclGroupStart", "ncclAllReduce", "ncclGroupEnd"}));
  }
  EXPECT_EQ(functions(fake_nccl::take_records()), (Names{"ncclCommAbort"}));
  const ncclUniqueId id2 = cuda::NcclExecutor::unique_id();
  {
    cuda::NcclExecutor ex(id2, 1, 0, 0);
    ex.enqueue(cuda::all_reduce_gradients(g.data(), g.size()), compute);
    fake_nccl::fail_next(ncclRemoteError, "peer gone");
    try {
      ex.wait();
      ADD_FAILURE() << "no failure";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(
          std::string(e.what()).find("NCCL failed asynchronously (rank 0 of 1): an NCCL error (fake) (peer gone)"),
          std::string::npos)
          << e.what();
    }
    fake_nccl::take_records();
  }
  EXPECT_EQ(functions(fake_nccl::take_records()), (Names{"ncclCommAbort"}));
  {
    cuda::NcclExecutor ex(cuda::NcclExecutor::unique_id(), 1, 0, 0);
    ex.enqueue(cuda::all_reduce_gradients(g.data(), g.size()), compute);
    ex.wait();
    fake_nccl::take_records();
  }
  EXPECT_EQ(functions(fake_nccl::take_records()), (Names{"ncclCommDestroy"}));
}

TEST(NcclExecutorOnFakeNccl, DataTypes) {
  EXPECT_EQ(cuda::nccl_data_type(cuda::ElementType::f32), ncclFloat32);
  EXPECT_EQ(cuda::nccl_data_type(cuda::ElementType::bf16), ncclBfloat16);
}

}  // namespace
