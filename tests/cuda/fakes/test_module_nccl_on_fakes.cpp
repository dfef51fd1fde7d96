// NCCL end to end on the CPU, through the module's own code: backend/nccl_group.h (host side) -> the adapter
// (cuda_module_backend.h) -> the module's table (module_entry.cpp: nccl_unique_id, nccl_comm_create, nccl_run,
// nccl_wait, nccl_query over CudaBackend) -> NcclExecutor -> the fake NCCL (tests/cuda/executors/fake_nccl.cpp; ranks
// are threads, every call recorded) on the fake CUDA runtime. The unique id travels over the local world's
// Communicator. (The fake runtime has one "GPU", so every rank's backend is on GPU 0, which real NCCL refuses.)
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "../executors/fake_nccl.h"
#include "backend/cuda/module_abi.h"
#include "backend/cuda_module_backend.h"
#include "backend/nccl_group.h"
#include "parallel/local_communicator.h"

extern "C" const VitpipeCudaModule* vitpipe_cuda_module(void);

using namespace vitpipe;
using fake_nccl::Record;

namespace {

Tensor on_device(Backend& b, const std::vector<float>& v) {
  Tensor host = Tensor::empty({static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), host.f32());
  Tensor device = b.allocate(host.shape(), DType::f32);
  b.copy_from_host(host, device);
  return device;
}

std::vector<float> read_back(Backend& b, const Tensor& device) {
  Tensor host = Tensor::empty(device.shape(), DType::f32);
  b.copy_to_host(device, host);
  return std::vector<float>(host.f32(), host.f32() + host.numel());
}

std::vector<float> values(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.25f * static_cast<float>(rank + 1) + static_cast<float>(i);
  return v;
}

std::vector<std::string> functions(const std::vector<Record>& records) {
  std::vector<std::string> names;
  for (const Record& r : records) names.push_back(r.function);
  return names;
}

using Names = std::vector<std::string>;

class ModuleNcclOnFakes : public ::testing::TestWithParam<int> {};

TEST_P(ModuleNcclOnFakes, NcclGroupThroughTheModulesTable) {
  const int ranks = GetParam();
  const VitpipeCudaModule& module = *vitpipe_cuda_module();
  ASSERT_EQ(module.abi_version, VITPIPE_CUDA_MODULE_ABI_VERSION);
  const size_t n = 4099;
  run_local_ranks(ranks, [&](Communicator& comm) {
    std::unique_ptr<Backend> backend = make_cuda_module_backend(module, 0, false);
    fake_nccl::take_records();
    NcclGroup nccl(*backend, comm);
    std::vector<Record> records = fake_nccl::take_records();
    // Rank 0 alone asks for the id; every rank joins with it.
    const Names joining = comm.rank() == 0 ? Names{"ncclGetUniqueId", "ncclCommInitRank"} : Names{"ncclCommInitRank"};
    EXPECT_EQ(functions(records), joining);
    EXPECT_EQ(records.back().count, static_cast<size_t>(ranks));
    EXPECT_EQ(records.back().peer, comm.rank());

    const Tensor g = on_device(*backend, values(comm.rank(), n));
    nccl.allreduce_sum(g);
    nccl.wait();
    EXPECT_TRUE(nccl.done());
    std::vector<float> want(n, 0.0f);
    for (int r = 0; r < ranks; ++r) {
      const std::vector<float> v = values(r, n);
      for (size_t i = 0; i < n; ++i) want[i] += v[i];  // exact: quarters and integers
    }
    EXPECT_EQ(read_back(*backend, g), want);
    records = fake_nccl::take_records();
    ASSERT_EQ(functions(records), (Names{"ncclGroupStart", "ncclAllReduce", "ncclGroupEnd"}));
    EXPECT_EQ(records[1].send, g.raw());
    EXPECT_EQ(records[1].recv, g.raw());
    EXPECT_EQ(records[1].count, n);
    EXPECT_EQ(records[1].type, ncclFloat32);
    const cudaStream_t communication = records[1].stream;

    // A ring of send/recv in one group, on the backend's stream (not the communication stream).
    const int next = (comm.rank() + 1) % ranks, previous = (comm.rank() + ranks - 1) % ranks;
    const Tensor out = on_device(*backend, values(comm.rank(), 64));
    const Tensor in = backend->allocate({64}, DType::f32);
    nccl.begin_group();
    nccl.send(out, next);
    nccl.recv(in, previous);
    nccl.end_group();
    nccl.wait();
    EXPECT_EQ(read_back(*backend, in), values(previous, 64));
    records = fake_nccl::take_records();
    ASSERT_EQ(functions(records), (Names{"ncclGroupStart", "ncclSend", "ncclRecv", "ncclGroupEnd"}));
    EXPECT_EQ(records[1].peer, next);
    EXPECT_EQ(records[2].peer, previous);
    EXPECT_EQ(records[1].stream, records[2].stream);
    EXPECT_NE(records[1].stream, communication);

    // Reduce onto the last rank, then broadcast from it.
    const Tensor r = on_device(*backend, values(comm.rank(), n));
    nccl.reduce_sum(r, ranks - 1);
    nccl.broadcast(r, ranks - 1);
    nccl.wait();
    EXPECT_EQ(read_back(*backend, r), want);
    records = fake_nccl::take_records();
    ASSERT_EQ(functions(records), (Names{"ncclGroupStart", "ncclReduce", "ncclGroupEnd", "ncclGroupStart",
                                         "ncclBroadcast", "ncclGroupEnd"}));
    EXPECT_EQ(records[1].peer, ranks - 1);
    EXPECT_EQ(records[4].peer, ranks - 1);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ModuleNcclOnFakes, ::testing::Values(2, 3));

TEST(ModuleNcclOnFakesTable, RefusesCallsItCannotRunAndReportsNcclsMessages) {
  const VitpipeCudaModule& m = *vitpipe_cuda_module();
  char error[512] = {};
  void* backend = nullptr;
  ASSERT_EQ(m.backend_create(0, 0, &backend, error, sizeof error), 0) << error;
  char id[VITPIPE_NCCL_UNIQUE_ID_BYTES] = {};
  ASSERT_EQ(m.nccl_unique_id(id, error, sizeof error), 0) << error;
  void* comm = nullptr;
  ASSERT_EQ(m.nccl_comm_create(backend, id, 1, 0, &comm, error, sizeof error), 0) << error;
  void* buffer = nullptr;
  ASSERT_EQ(m.backend_allocate(backend, 64, &buffer, error, sizeof error), 0) << error;

  VitpipeNcclCall call{VITPIPE_NCCL_ALL_REDUCE,          VITPIPE_DTYPE_F32, buffer, buffer, 16, -1,
                       VITPIPE_NCCL_STREAM_COMMUNICATION};
  EXPECT_EQ(m.nccl_run(comm, &call, 1, 1, error, sizeof error), 0) << error;
  int done = 0;
  EXPECT_EQ(m.nccl_query(comm, &done, error, sizeof error), 0) << error;
  EXPECT_EQ(done, 1);

  VitpipeNcclCall bad = call;
  bad.dtype = VITPIPE_DTYPE_F16;
  EXPECT_NE(m.nccl_run(comm, &bad, 1, 0, error, sizeof error), 0);
  EXPECT_NE(std::string(error).find("only f32 and bf16 move"), std::string::npos) << error;
  bad = call;
  bad.op = 17;
  EXPECT_NE(m.nccl_run(comm, &bad, 1, 0, error, sizeof error), 0);
  EXPECT_NE(std::string(error).find("unknown op 17"), std::string::npos) << error;
  bad = call;
  bad.stream = 5;
  EXPECT_NE(m.nccl_run(comm, &bad, 1, 0, error, sizeof error), 0);
  EXPECT_NE(std::string(error).find("unknown stream 5"), std::string::npos) << error;

  fake_nccl::fail_next(ncclInvalidUsage, "planted");
  EXPECT_NE(m.nccl_run(comm, &call, 1, 0, error, sizeof error), 0);
  EXPECT_NE(std::string(error).find("ncclAllReduce failed: invalid usage (fake) (planted)"), std::string::npos)
      << error;
  fake_nccl::take_records();
  m.nccl_comm_destroy(comm);  // after a failure: aborted
  EXPECT_EQ(functions(fake_nccl::take_records()), (Names{"ncclCommAbort"}));
  m.backend_free(backend, buffer);
  m.backend_destroy(backend);
}

}  // namespace
