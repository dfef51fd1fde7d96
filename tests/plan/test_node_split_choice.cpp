// The node split a job runs with (plan/node_split_choice.h): the fastest ranks x threads by the core scaling among
// those whose ranks fit their memory by the planner's own memory model.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "plan/layout_search.h"
#include "plan/node_split_choice.h"
#include "util/error.h"

namespace vitpipe {
namespace {

// GEMM halves on 2 threads; the other operation takes `other_at_two` of its 1-thread time on 2.
CoreScaling scaling_with(double other_at_two) {
  CoreScaling s;
  s.threads = {1, 2};
  s.operations = {OpScaling{"GEMM", {1.0, 0.5}, 0, false}, OpScaling{"loader", {1.0, other_at_two}, 0, false}};
  s.bandwidth = {10e9, 20e9};
  s.gradient_bytes = 1e6;
  s.batch = 8;
  return s;
}

const auto kEveryRankFits = [](int, int) { return true; };

TEST(NodeSplitChoice, AnOperationThatDoesNotScalePicksMoreRanksOfFewerThreads) {
  const NodeSplitChoice serial = choose_node_split(scaling_with(1.0), 2, kEveryRankFits, "test");
  EXPECT_EQ(serial.chosen.ranks, 2);
  EXPECT_EQ(serial.chosen.threads, 1);
  const NodeSplitChoice parallel = choose_node_split(scaling_with(0.5), 2, kEveryRankFits, "test");
  EXPECT_EQ(parallel.chosen.ranks, 1);  // the same speed per rank, and one rank all-reduces nothing
  EXPECT_EQ(parallel.chosen.threads, 2);
  EXPECT_TRUE(serial.refused_ranks.empty());
}

TEST(NodeSplitChoice, RanksThatDoNotFitTheirMemoryAreNeverChosen) {
  const NodeSplitChoice c = choose_node_split(
      scaling_with(1.0), 4, [](int ranks, int) { return ranks <= 2; }, "test");
  EXPECT_EQ(c.chosen.ranks, 2);  // 4 x 1 is predicted faster, but does not fit
  EXPECT_EQ(c.chosen.threads, 2);
  EXPECT_EQ(c.refused_ranks, std::vector<int>{4});
  EXPECT_NE(describe_node_split(c, "p.json").find("4 x 1: does not fit its memory"), std::string::npos);
  const nlohmann::json j = node_split_json(c, "p.json");
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["splits"][0]["ranks"], 4);
  EXPECT_EQ(j["splits"][0]["fits_memory"], false);
  try {
    choose_node_split(
        scaling_with(1.0), 4, [](int, int) { return false; }, "--memory-per-process 1MiB");
    FAIL() << "no split fits: expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--memory-per-process 1MiB"), std::string::npos) << e.what();
  }
}

PlanInputs one_process(double memory) {
  PlanInputs in;
  in.config.hidden_size = 32;
  in.config.num_hidden_layers = 4;
  in.config.num_attention_heads = 4;
  in.config.intermediate_size = 48;
  in.config.image_size = 16;
  in.config.patch_size = 4;
  in.config.labels = {"a", "b", "c"};
  in.global_batch = 8;
  in.memory_per_process = memory;
  in.link = parse_link("100Gbit,1us");
  return in;
}

TEST(NodeSplitChoice, MemoryFitIsThePlannersMemoryModel) {
  // The planner's least memory for one process (one stage: boundaries do not matter) is where the fit turns.
  ProfilePoint point;
  point.micro_batch = 1;
  point.block = point.classifier_block = point.embeddings = point.head = PassTimes{1e-3, 2e-3, 1e-3, 1e-3};
  ModelProfile profile;
  profile.points = {point};
  const Plan plan = plan_layouts(one_process(1e12), profile);
  ASSERT_TRUE(plan.least_memory.has_value());
  const double least = plan.least_memory->memory.total();
  EXPECT_TRUE(some_layout_fits_memory(one_process(least)));
  EXPECT_FALSE(some_layout_fits_memory(one_process(least - 1)));
  PlanInputs three = one_process(1e12);
  three.processes = 3;  // 3 replicas cannot share 8 images, but 3 stages can hold 4 blocks and the head
  EXPECT_TRUE(some_layout_fits_memory(three));
  three.stages = 2;  // 2 stages x 1.5 replicas: no layout at all
  EXPECT_FALSE(some_layout_fits_memory(three));
}

TEST(NodeSplitChoice, TheProfileComesFromTheFlagElseTheCacheElseNowhere) {
  const auto dir = std::filesystem::temp_directory_path() / "vitpipe_node_split_choice_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_FALSE(find_core_scaling("", dir).has_value());
  EXPECT_FALSE(find_core_scaling("", "").has_value());
  {
    std::ofstream(dir / kCoreScalingCacheFile) << nlohmann::json{{"scaling", scaling_with(1.0).to_json()}}.dump();
    std::ofstream(dir / "given.json") << scaling_with(0.5).to_json().dump();
    std::ofstream(dir / "bad.json") << "{\"threads\": [1, 2]}";
  }
  const auto cached = find_core_scaling("", dir);
  ASSERT_TRUE(cached.has_value());
  EXPECT_EQ(cached->path, (dir / kCoreScalingCacheFile).string());
  EXPECT_DOUBLE_EQ(cached->scaling.operations[1].seconds[1], 1.0);
  const auto given = find_core_scaling((dir / "given.json").string(), dir);
  ASSERT_TRUE(given.has_value());
  EXPECT_DOUBLE_EQ(given->scaling.operations[1].seconds[1], 0.5);
  EXPECT_THROW(find_core_scaling((dir / "bad.json").string(), dir), Error);
  EXPECT_THROW(find_core_scaling((dir / "missing.json").string(), dir), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vitpipe
