#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/local_communicator.h"
#include "parallel/process_grid.h"

namespace vitpipe {
namespace {

// Runs the ranks with a watchdog: a hang is a failure, not a stuck test run. Returns the error message, or "".
std::string run_ranks(int size, const std::function<void(Communicator&)>& fn, double seconds = 20.0) {
  auto result = std::async(std::launch::async, [&]() -> std::string {
    try {
      run_local_ranks(size, fn);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  });
  if (result.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "local ranks hang after %.0f s\n", seconds);
    std::abort();
  }
  return result.get();
}

TEST(LocalCommunicator, RingExchangeOfFloatsAndBf16Bits) {
  const int n = 4;
  std::string error = run_ranks(n, [&](Communicator& comm) {
    const int next = (comm.rank() + 1) % n, previous = (comm.rank() + n - 1) % n;
    std::vector<float> out(1000), in(1000, -1.0f);
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(comm.rank() * 10000 + static_cast<int>(i));
    std::vector<uint16_t> out16(7, static_cast<uint16_t>(0x3f80 + comm.rank())), in16(7);
    CommRequest recv = comm.irecv(std::span<float>(in), previous, 5);
    CommRequest recv16 = comm.irecv(std::span<uint16_t>(in16), previous, 6);
    CommRequest send = comm.isend(std::span<const float>(out), next, 5);
    CommRequest send16 = comm.isend(std::span<const uint16_t>(out16), next, 6);
    recv.wait();
    recv16.wait();
    send.wait();
    send16.wait();
    for (size_t i = 0; i < in.size(); ++i) {
      VP_REQUIRE(in[i] == static_cast<float>(previous * 10000 + static_cast<int>(i)), "wrong value at ", i);
    }
    for (uint16_t v : in16) VP_REQUIRE(v == 0x3f80 + previous, "wrong bf16 bits");
    VP_REQUIRE(!recv.pending() && !send.pending(), "completed requests are empty");
  });
  EXPECT_EQ(error, "");
}

TEST(LocalCommunicator, SameTagMessagesArriveInOrderPostedBeforeOrAfter) {
  std::string error = run_ranks(2, [&](Communicator& comm) {
    if (comm.rank() == 0) {
      for (float v : {1.0f, 2.0f, 3.0f}) comm.isend(std::span<const float>(&v, 1), 1, 0).wait();
      comm.barrier();
      float late = 4.0f;
      comm.isend(std::span<const float>(&late, 1), 1, 0).wait();
    } else {
      float first = 0;
      CommRequest early = comm.irecv(std::span<float>(&first, 1), 0, 0);  // may be posted before the send
      comm.barrier();                                                     // all three sent by now
      float second = 0, third = 0, fourth = 0;
      comm.irecv(std::span<float>(&second, 1), 0, 0).wait();
      CommRequest r3 = comm.irecv(std::span<float>(&third, 1), 0, 0);
      CommRequest r4 = comm.irecv(std::span<float>(&fourth, 1), 0, 0);
      early.wait();
      r3.wait();
      r4.wait();
      VP_REQUIRE(first == 1 && second == 2 && third == 3 && fourth == 4, "out of order: ", first, second, third,
                 fourth);
    }
  });
  EXPECT_EQ(error, "");
}

TEST(LocalCommunicator, SizeMismatchAndBadPeersAreErrors) {
  std::string error = run_ranks(2, [&](Communicator& comm) {
    std::vector<float> buffer(4);
    if (comm.rank() == 0) {
      comm.isend(std::span<const float>(buffer.data(), 3), 1, 1).wait();
    } else {
      comm.irecv(std::span<float>(buffer), 0, 1).wait();
    }
  });
  EXPECT_NE(error.find("rank 1: received 12 bytes from rank 0 (tag 1) where the receive expected 16"),
            std::string::npos)
      << error;
  error = run_ranks(2, [&](Communicator& comm) {
    float x = 0;
    comm.isend(std::span<const float>(&x, 1), 2, 0);
  });
  EXPECT_NE(error.find("cannot send to rank 2: the communicator has 2 ranks"), std::string::npos) << error;
  error = run_ranks(2, [&](Communicator& comm) {
    float x = 0;
    comm.irecv(std::span<float>(&x, 1), 1 - comm.rank(), kMaxUserTag);
  });
  EXPECT_NE(error.find("message tag 32000 is outside [0, 32000)"), std::string::npos) << error;
}

TEST(LocalCommunicator, NonBlockingAllReduceOfSeveralBuckets) {
  const int n = 4;
  std::vector<std::vector<float>> results(n);
  std::string error = run_ranks(n, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> a(1001), b(17);
    for (size_t i = 0; i < a.size(); ++i) a[i] = 0.1f * static_cast<float>(i) + static_cast<float>(r);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(r * r);
    CommRequest ra = comm.iallreduce_sum(a.data(), a.size());
    CommRequest rb = comm.iallreduce_sum(b.data(), b.size());
    rb.wait();  // completion order need not follow posting order
    ra.wait();
    for (size_t i = 0; i < b.size(); ++i) VP_REQUIRE(b[i] == 0 + 1 + 4 + 9, "bucket b wrong");
    results[static_cast<size_t>(r)] = a;
  });
  ASSERT_EQ(error, "");
  for (size_t i = 0; i < results[0].size(); ++i) {
    const float x = 0.1f * static_cast<float>(i);
    EXPECT_EQ(results[0][i], (((x + 0.0f) + (x + 1.0f)) + (x + 2.0f)) + (x + 3.0f));           // rank order
    for (int r = 1; r < n; ++r) EXPECT_EQ(std::memcmp(&results[r][i], &results[0][i], 4), 0);  // same bits
  }
}

TEST(LocalCommunicator, AllReduceTestIsFalseUntilEveryMemberArrives) {
  std::string error = run_ranks(2, [&](Communicator& comm) {
    float x = 1.0f, go = 0.0f;
    if (comm.rank() == 0) {
      CommRequest request = comm.iallreduce_sum(&x, 1);
      VP_REQUIRE(!request.test(), "completed before rank 1 arrived");
      comm.isend(std::span<const float>(&go, 1), 1, 0).wait();  // rank 1 posts its part only after this
      request.wait();
    } else {
      comm.irecv(std::span<float>(&go, 1), 0, 0).wait();
      comm.iallreduce_sum(&x, 1).wait();
    }
    VP_REQUIRE(x == 2.0f, "sum is ", x);
  });
  EXPECT_EQ(error, "");
}

TEST(LocalCommunicator, NonBlockingReduceToARootAndBroadcast) {
  run_local_ranks(3, [](Communicator& world) {
    std::vector<float> data(1000, static_cast<float>(world.rank() + 1));
    CommRequest reduce = world.ireduce_sum(data.data(), data.size(), 1);
    reduce.wait();
    // The root holds the sum; the others keep what they had.
    const float want = world.rank() == 1 ? 6.0f : static_cast<float>(world.rank() + 1);
    for (float v : data) VP_REQUIRE(v == want, "rank ", world.rank(), ": ", v, " != ", want);
    std::vector<float> values(500, static_cast<float>(world.rank()));
    CommRequest broadcast = world.ibroadcast(values.data(), values.size(), 2);
    broadcast.wait();
    for (float v : values) VP_REQUIRE(v == 2.0f, "broadcast from rank 2");
  });
}

TEST(LocalCommunicator, SmallCollectives) {
  const int n = 3;
  std::string error = run_ranks(n, [&](Communicator& comm) {
    const int r = comm.rank();
    double values[3] = {static_cast<double>(r), static_cast<double>(-r), 1.5};
    comm.allreduce(values, 3, ReduceOp::sum);
    VP_REQUIRE(values[0] == 3 && values[1] == -3 && values[2] == 4.5, "allreduce sum");
    VP_REQUIRE(comm.allreduce(static_cast<double>(r), ReduceOp::max) == 2, "max");
    VP_REQUIRE(comm.allreduce(static_cast<double>(r), ReduceOp::min) == 0, "min");
    std::vector<float> shared(5, static_cast<float>(r));
    comm.broadcast(std::span<float>(shared), 1);
    for (float v : shared) VP_REQUIRE(v == 1.0f, "broadcast");
    comm.barrier();
    std::vector<float> mine(static_cast<size_t>(r + 1), static_cast<float>(r));  // variable length
    auto all = comm.gather(std::span<const float>(mine), 2);
    if (r == 2) {
      VP_REQUIRE(all.size() == 3, "gather size");
      for (int k = 0; k < n; ++k) {
        VP_REQUIRE(all[static_cast<size_t>(k)] == std::vector<float>(static_cast<size_t>(k + 1), k), "gather ", k);
      }
    } else {
      VP_REQUIRE(all.empty(), "non-root gets nothing");
    }
  });
  EXPECT_EQ(error, "");
}

TEST(LocalCommunicator, SplitIntoDataParallelGroups) {
  // 8 ranks = 4 stages x 2 replicas: the all-reduce of stage s sums ranks s and s + 4 only.
  std::string error = run_ranks(8, [&](Communicator& world) {
    ProcessGrid grid(world.size(), world.rank(), 4);
    auto group = split_data_parallel_group(world, grid);
    VP_REQUIRE(group && group->size() == 2 && group->rank() == grid.replica(), "group shape");
    float x = static_cast<float>(world.rank());
    group->iallreduce_sum(&x, 1).wait();
    VP_REQUIRE(x == static_cast<float>(2 * grid.stage() + 4), "stage ", grid.stage(), " sum ", x);
    // Point to point inside the group uses group ranks.
    float y = static_cast<float>(world.rank()), z = -1;
    CommRequest recv = group->irecv(std::span<float>(&z, 1), 1 - group->rank(), 0);
    group->isend(std::span<const float>(&y, 1), 1 - group->rank(), 0).wait();
    recv.wait();
    VP_REQUIRE(z == static_cast<float>(grid.data_parallel_ranks()[static_cast<size_t>(1 - group->rank())]), "p2p");
    auto none = world.split(world.rank() == 0 ? -1 : 0, 0);
    VP_REQUIRE((world.rank() == 0) == (none == nullptr), "negative color joins nothing");
    if (none) VP_REQUIRE(none->size() == 7 && none->rank() == world.rank() - 1, "color 0 group");
  });
  EXPECT_EQ(error, "");
}

TEST(LocalCommunicator, ARankThatThrowsWakesTheOthers) {
  std::atomic<int> woken{0};
  const auto start = std::chrono::steady_clock::now();
  std::string error = run_ranks(4, [&](Communicator& comm) {
    std::vector<float> buffer(64, 1.0f);
    for (int step = 0;; ++step) {
      if (comm.rank() == 2 && step == 3) throw Error("boom at step 3");
      try {
        // Rank 2 feeds rank 1 every step; at step 3 rank 1 waits for a message that never comes, the others
        // wait in an all-reduce rank 2 never joins.
        if (comm.rank() == 2) comm.isend(std::span<const float>(buffer), 1, 9).wait();
        if (comm.rank() == 1) comm.irecv(std::span<float>(buffer), 2, 9).wait();
        comm.iallreduce_sum(buffer.data(), buffer.size()).wait();
      } catch (const CommAborted&) {
        ++woken;
        throw;
      }
    }
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(error, "rank 2: boom at step 3");
  EXPECT_EQ(woken.load(), 3);
  EXPECT_LT(seconds, 5.0);
}

TEST(LocalCommunicator, PendingRequestsAreAbandonedWhenARankThrows) {
  std::string error = run_ranks(3, [&](Communicator& comm) {
    std::vector<float> buffer(16);
    CommRequest recv = comm.irecv(std::span<float>(buffer), (comm.rank() + 1) % 3, 0);
    CommRequest reduce = comm.iallreduce_sum(buffer.data() + 8, 8);
    if (comm.rank() == 0) throw Error("failed with requests pending");
    reduce.wait();
    recv.wait();
  });
  EXPECT_EQ(error, "rank 0: failed with requests pending");
}

TEST(LocalCommunicator, DeadlockIsReportedNotHung) {
  std::string error = run_ranks(2, [&](Communicator& comm) {
    float x = 0;
    comm.irecv(std::span<float>(&x, 1), 1 - comm.rank(), 3).wait();  // both receive first
    comm.isend(std::span<const float>(&x, 1), 1 - comm.rank(), 3).wait();
  });
  EXPECT_NE(error.find("deadlock: every rank is waiting or finished: rank 0 waits for a message from rank 1 (tag 3, "
                       "4 bytes); rank 1 waits for a message from rank 0"),
            std::string::npos)
      << error;
  error = run_ranks(2, [&](Communicator& comm) {
    if (comm.rank() == 1) return;  // finishes without joining the barrier
    comm.barrier();
  });
  EXPECT_NE(error.find("rank 0 waits for a barrier (1 of 2 members arrived); rank 1 has finished"), std::string::npos)
      << error;
}

TEST(LocalCommunicator, MismatchedCollectivesAreAnError) {
  std::string error = run_ranks(2, [&](Communicator& comm) {
    float x = 0;
    if (comm.rank() == 0) {
      comm.iallreduce_sum(&x, 1).wait();
    } else {
      comm.barrier();
    }
  });
  EXPECT_NE(error.find("collective mismatch"), std::string::npos) << error;
}

TEST(LocalCommunicator, OneRankWorldAndRunOrAbort) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK")) GTEST_SKIP() << "under mpirun";
  auto world = make_world_communicator();
  EXPECT_STREQ(world->kind(), "local");
  EXPECT_EQ(world->size(), 1);
  float x = 3.0f;
  world->iallreduce_sum(&x, 1).wait();
  EXPECT_EQ(x, 3.0f);
  EXPECT_EQ(world->gather(std::span<const float>(&x, 1), 0).size(), 1u);
  EXPECT_THROW(run_or_abort(*world, [] { throw Error("local failure"); }), Error);
  EXPECT_THROW(world->abort("stop"), Error);
}

}  // namespace
}  // namespace vitpipe
