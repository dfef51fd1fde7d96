// vitpipe's ring all-reduce (parallel/ring_allreduce.h) over ranks as threads: the sum of every rank's buffer, the
// same bits on every rank and on every run, for sizes that do not divide among the ranks (and smaller than them),
// several in flight at once driven by test() alone. Under mpirun it is the MPI communicator's all-reduce
// (parallel_mpi_collectives_np*).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "parallel/local_communicator.h"
#include "parallel/ring_allreduce.h"

namespace vitpipe {
namespace {

// Values with no exact float sum, computed the same way wherever they are (one correctly rounded division).
float value_of(int rank, size_t i) {
  return static_cast<float>((i * 7919 + static_cast<size_t>(rank) * 104729) % 1000) / 997.0f - 0.5f;
}

// Every rank's result of one all-reduce of `count` elements over `ranks` threads.
std::vector<std::vector<float>> reduce_on(int ranks, size_t count) {
  std::vector<std::vector<float>> results(static_cast<size_t>(ranks));
  run_local_ranks(ranks, [&](Communicator& comm) {
    std::vector<float> buffer(count);
    for (size_t i = 0; i < count; ++i) buffer[i] = value_of(comm.rank(), i);
    ring_allreduce_sum(comm, buffer.data(), buffer.size(), 7).wait();
    results[static_cast<size_t>(comm.rank())] = buffer;
  });
  return results;
}

TEST(RingAllreduce, SumsEveryRankSameBitsEverywhereAndEveryRun) {
  for (int ranks : {2, 3, 4}) {
    for (size_t count : {size_t{1}, size_t{2}, size_t{1001}, size_t{4096}}) {
      const auto first = reduce_on(ranks, count);
      const auto again = reduce_on(ranks, count);
      for (size_t i = 0; i < count; ++i) {
        double expected = 0;
        for (int r = 0; r < ranks; ++r) expected += value_of(r, i);
        EXPECT_NEAR(first[0][i], expected, 1e-6 * ranks) << ranks << " ranks, " << count << " elements, at " << i;
      }
      for (int r = 0; r < ranks; ++r) {
        EXPECT_EQ(std::memcmp(first[static_cast<size_t>(r)].data(), first[0].data(), count * sizeof(float)), 0)
            << "rank " << r << " of " << ranks << " differs from rank 0 (" << count << " elements)";
        EXPECT_EQ(std::memcmp(again[static_cast<size_t>(r)].data(), first[static_cast<size_t>(r)].data(),
                              count * sizeof(float)),
                  0)
            << "a second run differs on rank " << r << " of " << ranks;
      }
    }
  }
}

TEST(RingAllreduce, SeveralInFlightProgressByTestAlone) {
  const int ranks = 3;
  std::vector<std::vector<float>> a(ranks), b(ranks);
  run_local_ranks(ranks, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> x(500, static_cast<float>(r + 1)), y(37, static_cast<float>(10 * r));
    CommRequest rx = ring_allreduce_sum(comm, x.data(), x.size(), 1);
    CommRequest ry = ring_allreduce_sum(comm, y.data(), y.size(), 2);
    bool done_x = false, done_y = false;
    while (!(done_x && done_y)) {  // the order of completion is not the order of posting
      done_y = done_y || ry.test();
      done_x = done_x || rx.test();
    }
    a[static_cast<size_t>(r)] = x;
    b[static_cast<size_t>(r)] = y;
  });
  for (int r = 0; r < ranks; ++r) {
    for (float v : a[static_cast<size_t>(r)]) EXPECT_EQ(v, 1.0f + 2.0f + 3.0f);
    for (float v : b[static_cast<size_t>(r)]) EXPECT_EQ(v, 0.0f + 10.0f + 20.0f);
  }
}

TEST(RingAllreduce, OneRankLeavesTheBufferAlone) {
  run_local_ranks(1, [&](Communicator& comm) {
    float x = 2.5f;
    CommRequest request = ring_allreduce_sum(comm, &x, 1, 0);
    EXPECT_FALSE(request.pending());
    EXPECT_EQ(x, 2.5f);
  });
}

}  // namespace
}  // namespace vitpipe
