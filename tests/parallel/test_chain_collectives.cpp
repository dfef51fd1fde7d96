// vitpipe's chain reduce and broadcast (parallel/chain_collectives.h) over ranks as threads: the root gets the sum
// of every rank's buffer with the same bits on every run and the others keep theirs, every rank gets the root's
// buffer, for every root, sizes of several pieces with a short last one, and several in flight at once driven by
// test() alone. Under mpirun they are the MPI communicator's reduce and broadcast (parallel_mpi_collectives_np*).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "parallel/chain_collectives.h"
#include "parallel/local_communicator.h"

namespace vitpipe {
namespace {

float value_of(int rank, size_t i) {
  return static_cast<float>((i * 7919 + static_cast<size_t>(rank) * 104729) % 1000) / 997.0f - 0.5f;
}

// Sizes: one element, less than a piece, and two pieces and a bit (1 MiB pieces).
const size_t kSizes[] = {1, 1001, (size_t{1} << 19) + 5};

TEST(ChainCollectives, ReduceSumsEveryRankAtTheRootSameBitsEveryRun) {
  for (int ranks : {2, 3, 4}) {
    for (size_t count : kSizes) {
      for (int root = 0; root < ranks; ++root) {
        std::vector<float> first, again;
        std::atomic<int> changed_elsewhere{0};
        for (std::vector<float>* out : {&first, &again}) {
          run_local_ranks(ranks, [&](Communicator& comm) {
            std::vector<float> buffer(count);
            for (size_t i = 0; i < count; ++i) buffer[i] = value_of(comm.rank(), i);
            chain_reduce_sum(comm, buffer.data(), count, root, 3).wait();
            if (comm.rank() == root) {
              *out = buffer;
            } else {
              for (size_t i = 0; i < count; ++i) {
                if (buffer[i] != value_of(comm.rank(), i)) ++changed_elsewhere;
              }
            }
          });
        }
        ASSERT_EQ(first.size(), count);
        for (size_t i = 0; i < count; i += 997) {
          double expected = 0;
          for (int r = 0; r < ranks; ++r) expected += value_of(r, i);
          ASSERT_NEAR(first[i], expected, 1e-6 * ranks) << ranks << " ranks, root " << root << ", at " << i;
        }
        EXPECT_NEAR(
            first[count - 1],
            [&] {
              double e = 0;
              for (int r = 0; r < ranks; ++r) e += value_of(r, count - 1);
              return e;
            }(),
            1e-6 * ranks);
        EXPECT_EQ(std::memcmp(first.data(), again.data(), count * sizeof(float)), 0) << "a second run differs";
        EXPECT_EQ(changed_elsewhere.load(), 0) << "a rank other than the root had its buffer changed";
      }
    }
  }
}

TEST(ChainCollectives, BroadcastGivesEveryRankTheRootsBuffer) {
  for (int ranks : {2, 3, 5}) {
    for (size_t count : kSizes) {
      const int root = ranks - 2;
      std::vector<std::vector<float>> results(static_cast<size_t>(ranks));
      run_local_ranks(ranks, [&](Communicator& comm) {
        std::vector<float> buffer(count);
        for (size_t i = 0; i < count; ++i) buffer[i] = value_of(comm.rank(), i);
        chain_broadcast(comm, buffer.data(), count, root, 5).wait();
        results[static_cast<size_t>(comm.rank())] = buffer;
      });
      for (int r = 0; r < ranks; ++r) {
        EXPECT_EQ(std::memcmp(results[static_cast<size_t>(r)].data(), results[static_cast<size_t>(root)].data(),
                              count * sizeof(float)),
                  0)
            << "rank " << r << " of " << ranks << " (" << count << " elements)";
      }
      EXPECT_EQ(results[0][count - 1], value_of(root, count - 1));
    }
  }
}

TEST(ChainCollectives, SeveralInFlightWithOtherRootsProgressByTestAlone) {
  const int ranks = 3;
  std::vector<std::vector<float>> sums(ranks), copies(ranks);
  run_local_ranks(ranks, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> x((size_t{1} << 18) * 3, static_cast<float>(r + 1)), y(37, static_cast<float>(10 * r));
    CommRequest rx = chain_reduce_sum(comm, x.data(), x.size(), 1, 1);
    CommRequest ry = chain_broadcast(comm, y.data(), y.size(), 2, 2);
    bool done_x = false, done_y = false;
    while (!(done_x && done_y)) {
      done_y = done_y || ry.test();
      done_x = done_x || rx.test();
    }
    sums[static_cast<size_t>(r)] = x;
    copies[static_cast<size_t>(r)] = y;
  });
  for (float v : sums[1]) ASSERT_EQ(v, 1.0f + 2.0f + 3.0f);
  for (int r = 0; r < ranks; ++r) {
    for (float v : copies[static_cast<size_t>(r)]) ASSERT_EQ(v, 20.0f);
  }
}

TEST(ChainCollectives, OneRankLeavesTheBufferAloneAndABadRootIsRefused) {
  run_local_ranks(1, [&](Communicator& comm) {
    float x = 2.5f;
    EXPECT_FALSE(chain_reduce_sum(comm, &x, 1, 0, 0).pending());
    EXPECT_FALSE(chain_broadcast(comm, &x, 1, 0, 0).pending());
    EXPECT_EQ(x, 2.5f);
    EXPECT_THROW(chain_broadcast(comm, &x, 1, 1, 0), Error);
  });
}

}  // namespace
}  // namespace vitpipe
