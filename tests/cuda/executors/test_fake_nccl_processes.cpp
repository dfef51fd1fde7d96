// The fake NCCL's transport between processes (fake_nccl_processes.h), with ranks as forked processes: a group of
// collectives gives every rank what the in-process interpreter gives (the threads' arithmetic), and a rank that never
// joins or never issues its collective is an error after the timeout, not a hang, with no segment left in /dev/shm;
// sends are buffered and each recv takes its peer's next send.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/calls/nccl_interpreter.h"
#include "fake_nccl_processes.h"

using namespace vitpipe;
using std::chrono::milliseconds;

namespace {

constexpr int kRanks = 3;
constexpr size_t kCount = 1000;

// Rank r's buffers: values whose sums depend on the order of rounding, and a bf16 buffer for the broadcast.
struct Buffers {
  std::vector<float> sum, reduced;
  std::vector<uint16_t> broadcast;
  explicit Buffers(int r) : sum(kCount), reduced(kCount), broadcast(kCount) {
    for (size_t i = 0; i < kCount; ++i) {
      sum[i] = (i % 7 == 0 ? 1e8f : 1.0f) * static_cast<float>(r + 1) / 3.0f + 1e-3f * static_cast<float>(i);
      reduced[i] = static_cast<float>(r) - 0.1f * static_cast<float>(i);
      broadcast[i] = static_cast<uint16_t>(0x3f80 + r * 16 + i % 16);
    }
  }
  cuda::NcclGroup group() {
    return {{{cuda::NcclOp::all_reduce, sum.data(), sum.data(), kCount, cuda::ElementType::f32, -1},
             {cuda::NcclOp::broadcast, broadcast.data(), broadcast.data(), kCount, cuda::ElementType::bf16, 1},
             {cuda::NcclOp::reduce, reduced.data(), reduced.data(), kCount, cuda::ElementType::f32, 2}}};
  }
  bool operator==(const Buffers& o) const {
    return std::memcmp(sum.data(), o.sum.data(), kCount * 4) == 0 &&
           std::memcmp(reduced.data(), o.reduced.data(), kCount * 4) == 0 &&
           std::memcmp(broadcast.data(), o.broadcast.data(), kCount * 2) == 0;
  }
};

// Every rank's buffers after the group, as the in-process ranks compute them.
std::vector<Buffers> expected() {
  std::vector<Buffers> ranks;
  for (int r = 0; r < kRanks; ++r) ranks.emplace_back(r);
  std::vector<std::vector<cuda::NcclGroup>> programs;
  for (Buffers& b : ranks) programs.push_back({b.group()});
  cuda::interpret_nccl(programs);
  return ranks;
}

cuda::NcclIdBytes test_id(const char* what) {
  cuda::NcclIdBytes id = cuda::host_nccl_unique_id();
  std::strncpy(id.data() + 64, what, 60);
  return id;
}

// POSIX shared memory is files in /dev/shm on Linux; without it the transport cannot run.
#define SKIP_WITHOUT_SHM() \
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm for POSIX shared memory"

bool segment_left(const cuda::NcclIdBytes& id) {
  return std::filesystem::exists("/dev/shm" + fake_nccl::segment_name(id));
}

// Rank r's part, for a forked child: 0 when its buffers end as expected.
int rank_runs_group(const cuda::NcclIdBytes& id, int r) {
  try {
    fake_nccl::ProcessNcclComm comm(id, kRanks, r, milliseconds(20000));
    Buffers mine(r);
    comm.run(mine.group());
    comm.run(mine.group());  // a second group reuses the segment's regions
    std::vector<Buffers> want = expected();
    std::vector<std::vector<cuda::NcclGroup>> again;
    for (Buffers& b : want) again.push_back({b.group()});
    cuda::interpret_nccl(again);
    return mine == want[static_cast<size_t>(r)] ? 0 : 1;
  } catch (const std::exception&) {
    return 2;
  }
}

}  // namespace

TEST(FakeNcclAcrossProcesses, CollectivesEqualTheInProcessRanksArithmetic) {
  SKIP_WITHOUT_SHM();
  const cuda::NcclIdBytes id = test_id("collectives");
  std::vector<pid_t> children;
  for (int r = 1; r < kRanks; ++r) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) _exit(rank_runs_group(id, r));
    children.push_back(pid);
  }
  EXPECT_EQ(rank_runs_group(id, 0), 0);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a forked rank's buffers differ: " << status;
  }
  EXPECT_FALSE(segment_left(id));
}

TEST(FakeNcclAcrossProcesses, ARankThatNeverJoinsIsAnErrorAfterTheTimeout) {
  SKIP_WITHOUT_SHM();
  const cuda::NcclIdBytes id = test_id("never joins");
  const auto start = std::chrono::steady_clock::now();
  try {
    fake_nccl::ProcessNcclComm comm(id, 2, 0, milliseconds(200));
    ADD_FAILURE() << "joined without its peer";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("only 1 of 2 ranks joined"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_FALSE(segment_left(id));
}

TEST(FakeNcclAcrossProcesses, ARankThatDiesBeforeItsCollectiveIsAnErrorAfterTheTimeout) {
  SKIP_WITHOUT_SHM();
  const cuda::NcclIdBytes id = test_id("dies");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      fake_nccl::ProcessNcclComm comm(id, 2, 1, milliseconds(20000));
    } catch (...) {
      _exit(2);
    }
    _exit(0);  // gone without its collective
  }
  fake_nccl::ProcessNcclComm comm(id, 2, 0, milliseconds(300));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  Buffers mine(0);
  cuda::NcclGroup group = mine.group();
  group.calls.resize(1);
  try {
    comm.run(group);
    ADD_FAILURE() << "the all-reduce ran without its peer";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("only 1 of 2 ranks issued"), std::string::npos) << e.what();
  }
}

TEST(FakeNcclAcrossProcesses, SendsAreBufferedAndEachRecvTakesItsPeersNextSend) {
  SKIP_WITHOUT_SHM();
  const cuda::NcclIdBytes id = test_id("send recv");
  // Both ranks send two messages to the other before receiving (buffered: no deadlock), then receive them in order;
  // a recv of the wrong count is refused.
  auto exchange = [&](int r) {
    fake_nccl::ProcessNcclComm comm(id, 2, r, milliseconds(20000));
    const int peer = 1 - r;
    std::vector<float> first(kCount), second(3), got_first(kCount), got_second(3), wrong(4);
    for (size_t i = 0; i < kCount; ++i) first[i] = static_cast<float>(r * 10000 + static_cast<int>(i));
    for (size_t i = 0; i < 3; ++i) second[i] = -static_cast<float>(r + 1) * static_cast<float>(i + 1);
    comm.run({{{cuda::NcclOp::send, first.data(), nullptr, kCount, cuda::ElementType::f32, peer},
               {cuda::NcclOp::send, second.data(), nullptr, 3, cuda::ElementType::f32, peer}}});
    comm.run({{{cuda::NcclOp::recv, nullptr, got_first.data(), kCount, cuda::ElementType::f32, peer},
               {cuda::NcclOp::recv, nullptr, got_second.data(), 3, cuda::ElementType::f32, peer}}});
    bool ok = true;
    for (size_t i = 0; i < kCount; ++i) ok &= got_first[i] == static_cast<float>(peer * 10000 + static_cast<int>(i));
    for (size_t i = 0; i < 3; ++i) ok &= got_second[i] == -static_cast<float>(peer + 1) * static_cast<float>(i + 1);
    comm.run({{{cuda::NcclOp::send, second.data(), nullptr, 3, cuda::ElementType::f32, peer}}});
    try {
      comm.run({{{cuda::NcclOp::recv, nullptr, wrong.data(), 4, cuda::ElementType::f32, peer}}});
      ok = false;
    } catch (const std::runtime_error& e) {
      ok &= std::string(e.what()).find("meets a send of 3 x f32") != std::string::npos;
    }
    return ok;
  };
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      _exit(exchange(1) ? 0 : 1);
    } catch (...) {
      _exit(2);
    }
  }
  EXPECT_TRUE(exchange(0));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the forked rank: " << status;
  EXPECT_FALSE(segment_left(id));
}
