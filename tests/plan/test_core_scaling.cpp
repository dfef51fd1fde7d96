// The node split (plan/core_scaling.h): per-operation scaling measured at 1 and 2 threads decides ranks x threads.
#include <gtest/gtest.h>

#include "plan/core_scaling.h"
#include "util/error.h"

namespace vitpipe {
namespace {

// A step of two operations, measured at 1 and 2 threads; `other_at_two` says how the second one scaled.
CoreScaling two_operations(double other_at_two) {
  CoreScaling s;
  s.threads = {1, 2};
  s.operations = {OpScaling{"GEMM", {1.0, 0.5}, 0, false}, OpScaling{"LayerNorm", {1.0, other_at_two}, 0, false}};
  s.bandwidth = {10e9, 20e9};
  s.gradient_bytes = 1e8;
  s.batch = 32;
  return s;
}

TEST(CoreScaling, KarpFlattAndAmdahlAgree) {
  // 1.6x on 2 threads: a quarter of the work serial; Amdahl with that quarter gives the 1.6x back.
  EXPECT_DOUBLE_EQ(karp_flatt_serial_fraction(1.6, 2), 0.25);
  EXPECT_DOUBLE_EQ(amdahl_speedup(0.25, 2), 1.6);
  EXPECT_DOUBLE_EQ(karp_flatt_serial_fraction(2.0, 2), 0.0);
  EXPECT_DOUBLE_EQ(karp_flatt_serial_fraction(1.0, 2), 1.0);
  EXPECT_DOUBLE_EQ(karp_flatt_serial_fraction(2.3, 2), 0.0);  // superlinear: noise, clamped
  EXPECT_NEAR(amdahl_speedup(0.25, 64), 1.0 / (0.25 + 0.75 / 64), 1e-12);
}

TEST(CoreScaling, AnOperationThatDoesNotScalePrefersMoreRanksOfFewerThreads) {
  const CoreScaling serial = two_operations(1.0);  // LayerNorm as slow on 2 threads as on 1
  EXPECT_DOUBLE_EQ(serial_fraction(serial, serial.operations[1]), 1.0);
  EXPECT_DOUBLE_EQ(serial_fraction(serial, serial.operations[0]), 0.0);
  const std::vector<NodeSplit> splits = rank_node_splits(serial, 16);
  ASSERT_EQ(splits.size(), 5u);  // 1, 2, 4, 8, 16 ranks
  EXPECT_EQ(splits.front().ranks, 16);
  EXPECT_EQ(splits.front().threads, 1);
  EXPECT_EQ(splits.back().ranks, 1) << "one rank of 16 threads waits on the serial operation";
}

TEST(CoreScaling, OperationsThatScaleKeepOneRankOfAllThreads) {
  const CoreScaling parallel = two_operations(0.5);  // both halve on 2 threads: only the all-reduce differs
  const std::vector<NodeSplit> splits = rank_node_splits(parallel, 16);
  EXPECT_EQ(splits.front().ranks, 1);
  EXPECT_EQ(splits.front().threads, 16);
  EXPECT_GT(splits.back().allreduce_seconds, 0.0);
}

TEST(CoreScaling, ABandwidthBoundOperationIsFlooredByTheSharedBandwidth) {
  CoreScaling s = two_operations(0.5);
  s.operations[1].bandwidth_bound = true;
  s.operations[1].bytes = 8e9;              // 0.8 s at 1 thread's 10 GB/s
  s.bandwidth = {10e9, 12e9};               // saturating: serial fraction 2/3 of the bandwidth
  const double node = bandwidth_at(s, 16);  // Amdahl with f = 2/3: 10 GB/s x 1/(2/3 + 1/48)
  EXPECT_NEAR(node, 10e9 / (2.0 / 3 + 1.0 / 3 / 16), 1e3);
  EXPECT_NEAR(predicted_op_seconds(s, s.operations[1], 1, 16), 16 * 8e9 / node, 1e-9);
  EXPECT_NEAR(predicted_op_seconds(s, s.operations[0], 16, 1), 1.0 / 16, 1e-12);
}

TEST(CoreScaling, ReadsBackWhatItWritesAndRefusesMalformedFiles) {
  const CoreScaling s = two_operations(0.8);
  const CoreScaling back = CoreScaling::from_json(nlohmann::json{{"scaling", s.to_json()}}, "bench.json");
  ASSERT_EQ(back.operations.size(), 2u);
  EXPECT_EQ(back.operations[1].seconds, s.operations[1].seconds);
  nlohmann::json bad = s.to_json();
  bad["threads"] = {2, 4};
  EXPECT_THROW(CoreScaling::from_json(bad, "bench.json"), Error);
  bad = s.to_json();
  bad.erase("operations");
  try {
    CoreScaling::from_json(bad, "bench.json");
    FAIL() << "a profile without operations was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bench.json: field \"operations\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vitpipe
