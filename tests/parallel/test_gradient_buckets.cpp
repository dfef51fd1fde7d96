#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <vector>

#include "model/parameter_layout.h"
#include "parallel/gradient_buckets.h"
#include "parallel/local_communicator.h"
#include "parallel/optimizer_shards.h"
#include "parallel/parameter_gather.h"
#include "parallel/process_grid.h"
#include "parallel/trace.h"

namespace vitpipe {
namespace {

std::shared_ptr<const ParameterLayout> tiny_layout(int layers = 4) {
  ViTConfig config;
  config.hidden_size = 16;
  config.num_hidden_layers = layers;
  config.num_attention_heads = 2;
  config.intermediate_size = 32;
  config.image_size = 8;
  config.patch_size = 4;
  config.labels = {"a", "b", "c"};
  return std::make_shared<const ParameterLayout>(config);
}

std::string run_ranks(int size, const std::function<void(Communicator&)>& fn) {
  auto result = std::async(std::launch::async, [&]() -> std::string {
    try {
      run_local_ranks(size, fn);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  });
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    std::fprintf(stderr, "local ranks hang\n");
    std::abort();
  }
  return result.get();
}

TEST(GradientBuckets, CutAtParameterBoundariesFromTheEnd) {
  auto layout = tiny_layout();
  FlatParameters range(layout, 1, 5);  // blocks 0..3 and the head
  const size_t bucket_bytes = 2048;
  auto buckets = make_gradient_buckets({range}, bucket_bytes);
  ASSERT_GE(buckets.size(), 3u);
  // Contiguous, covering the range exactly, the first bucket at the end.
  EXPECT_EQ(buckets.front().end, range.numel());
  EXPECT_EQ(buckets.back().begin, 0);
  std::vector<int64_t> boundaries;
  for (const ParamSpec* spec : range.held_specs()) boundaries.push_back(spec->offset - range.begin());
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (b + 1 < buckets.size()) {
      EXPECT_EQ(buckets[b + 1].end, buckets[b].begin);
    }
    EXPECT_NE(std::find(boundaries.begin(), boundaries.end(), buckets[b].begin), boundaries.end()) << b;
    // Every bucket but the front-most reached the size; removing its first parameter would drop below it.
    if (b + 1 < buckets.size()) {
      EXPECT_GE(buckets[b].bytes(), bucket_bytes);
    }
    // Segments: those of its first and last parameters.
    const ParamSpec* first = nullptr;
    const ParamSpec* last = nullptr;
    for (const ParamSpec* spec : range.held_specs()) {
      const int64_t offset = spec->offset - range.begin();
      if (offset == buckets[b].begin) first = spec;
      if (offset + spec->numel == buckets[b].end) last = spec;
    }
    ASSERT_TRUE(first && last);
    EXPECT_EQ(buckets[b].first_segment, first->segment);
    EXPECT_EQ(buckets[b].last_segment, last->segment);
  }
  // One bucket per parameter when the size is tiny; one bucket for everything when it is huge.
  EXPECT_EQ(make_gradient_buckets({range}, 1).size(), range.held_specs().size());
  EXPECT_EQ(make_gradient_buckets({range}, size_t{1} << 40).size(), 1u);
  // Two chunks (interleaved): the later chunk's buckets come first.
  auto two = make_gradient_buckets({FlatParameters(layout, 0, 1), FlatParameters(layout, 4, 5)}, size_t{1} << 40);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].chunk, 1);
  EXPECT_EQ(two[1].chunk, 0);
}

TEST(GradientBuckets, LaunchAsSegmentsBecomeFinal) {
  auto layout = tiny_layout();
  FlatParameters grads(layout, 0, 5);
  GradientBucketOptions options;
  options.bucket_bytes = layout->segment_end(5) * 4 - layout->segment_begin(4) * 4;  // the head + last block
  GradientBuckets buckets({grads}, nullptr, options);
  const auto& list = buckets.buckets();
  ASSERT_GE(list.size(), 2u);
  EXPECT_EQ(list[0].last_segment, 5);
  EXPECT_EQ(list[0].first_segment, 4);
  buckets.mark_ready(5);
  EXPECT_FALSE(buckets.launched(0));  // still needs block 3 (segment 4)
  buckets.mark_ready(4);
  EXPECT_TRUE(buckets.launched(0));
  EXPECT_FALSE(buckets.launched(list.size() - 1));
  buckets.finish();
  EXPECT_EQ(buckets.stats().buckets, static_cast<int>(list.size()));
  EXPECT_EQ(buckets.stats().bytes, static_cast<size_t>(grads.numel()) * 4);
  EXPECT_FALSE(buckets.launched(0));  // reset for the next step
  EXPECT_THROW(buckets.mark_ready(6), Error);
}

// 2 stages x 3 replicas as threads: each stage's gradients are summed over its replicas and scaled, step after
// step, with the segments marked in backward order.
TEST(GradientBuckets, AllReduceAcrossReplicasWithScaling) {
  auto layout = tiny_layout();
  const int stages = 2, replicas = 3;
  std::string error = run_ranks(stages * replicas, [&](Communicator& world) {
    ProcessGrid grid(world.size(), world.rank(), stages);
    auto group = world.split(grid.stage(), grid.replica());
    const auto ranges = split_segments(4, stages);
    const SegmentRange mine = ranges[static_cast<size_t>(grid.stage())];
    FlatParameters grads(layout, mine.first, mine.last);
    TraceRecorder trace(true, world.rank());
    GradientBucketOptions options;
    options.bucket_bytes = 1000;
    options.scale = 1.0f / replicas;
    GradientBuckets buckets({grads}, group.get(), options, &trace);
    VP_REQUIRE(buckets.buckets().size() > 2, "want several buckets");
    for (int step = 0; step < 3; ++step) {
      float* g = grads.data();
      for (int64_t i = 0; i < grads.numel(); ++i) g[i] = static_cast<float>(grid.replica() + 1) * (i % 7) + step;
      for (int s = mine.last; s >= mine.first; --s) {
        buckets.mark_ready(s);
        buckets.poll();
      }
      buckets.finish();
      for (int64_t i = 0; i < grads.numel(); ++i) {
        const float expected = (1.0f + 2.0f + 3.0f) * (i % 7) / 3.0f + step;
        VP_REQUIRE(std::abs(g[i] - expected) <= 1e-5f * (1 + std::abs(expected)), "rank ", world.rank(), " step ", step,
                   " element ", i, ": ", g[i], " != ", expected);
      }
      const auto& stats = buckets.stats();
      VP_REQUIRE(stats.hidden_fraction() >= 0.0 && stats.hidden_fraction() <= 1.0, "hidden fraction");
      VP_REQUIRE(stats.exposed_seconds <= stats.window_seconds + 1e-9, "exposed within window");
    }
    int reductions = 0;
    for (const auto& e : trace.events()) reductions += e.name == "allreduce" ? 1 : 0;
    VP_REQUIRE(reductions == 3 * static_cast<int>(buckets.buckets().size()), "one trace event per bucket and step");
  });
  EXPECT_EQ(error, "");
}

TEST(GradientBuckets, FinishMarksWhatIsLeft) {
  auto layout = tiny_layout(2);
  std::string error = run_ranks(2, [&](Communicator& world) {
    FlatParameters grads(layout, 0, 3);
    for (int64_t i = 0; i < grads.numel(); ++i) grads.data()[i] = 1.0f;
    GradientBuckets buckets({grads}, &world, GradientBucketOptions{64, 0.5f});
    buckets.finish();  // no mark_ready at all
    for (int64_t i = 0; i < grads.numel(); ++i) VP_REQUIRE(grads.data()[i] == 1.0f, "sum 2 x 0.5");
  });
  EXPECT_EQ(error, "");
}

TEST(OptimizerShards, ContiguousAlignedAndBalanced) {
  // 100000 elements from offset 1000, 3 shards on a grid of 64: boundaries at multiples of 64, sizes within 64.
  const auto shards = shard_ranges(1000, 101000, 3, 64);
  ASSERT_EQ(shards.size(), 3u);
  EXPECT_EQ(shards.front().begin, 1000);
  EXPECT_EQ(shards.back().end, 101000);
  for (size_t r = 0; r < shards.size(); ++r) {
    if (r > 0) {
      EXPECT_EQ(shards[r].begin, shards[r - 1].end);
    }
    if (r + 1 < shards.size()) {
      EXPECT_EQ(shards[r].end % 64, 0);
    }
    EXPECT_NEAR(static_cast<double>(shards[r].numel()), 100000.0 / 3, 64.0);
  }
  // Fewer aligned chunks than parts: some shards are empty, together they still cover the range.
  const auto few = shard_ranges(0, 100, 4, 64);
  int64_t covered = 0;
  for (const auto& shard : few) covered += shard.numel();
  EXPECT_EQ(covered, 100);
  EXPECT_EQ(shard_ranges(5, 9, 1, 64), (std::vector<ElementRange>{{5, 9}}));
}

TEST(GradientBuckets, ShardedBucketsAreCutAtShardBoundariesAndOwned) {
  auto layout = tiny_layout();
  FlatParameters grads(layout, 0, layout->num_segments() - 1);
  const auto shards = shard_ranges(grads.begin(), grads.begin() + grads.numel(), 3, 128);
  const auto buckets = make_gradient_buckets({grads}, 2000, {shards});
  int64_t covered = 0;
  for (const auto& bucket : buckets) {
    ASSERT_GE(bucket.owner, 0);
    const ElementRange& owner = shards[static_cast<size_t>(bucket.owner)];
    EXPECT_GE(bucket.begin + grads.begin(), owner.begin);
    EXPECT_LE(bucket.end + grads.begin(), owner.end);
    covered += bucket.end - bucket.begin;
  }
  EXPECT_EQ(covered, grads.numel());
  for (const auto& bucket : make_gradient_buckets({grads}, 2000)) EXPECT_EQ(bucket.owner, -1);
}

// The reduce-scatter (each bucket summed into its owner) and the all-gather (each bucket broadcast from its owner):
// after both, every replica holds what an all-reduce gives, and the owners held it in between.
TEST(GradientBuckets, ReduceScatterThenParameterGatherAcrossReplicas) {
  auto layout = tiny_layout();
  const int replicas = 3;
  std::string error = run_ranks(replicas, [&](Communicator& world) {
    const int last = layout->num_segments() - 1;
    FlatParameters grads(layout, 0, last), params(layout, 0, last);
    const auto shards = shard_ranges(0, grads.numel(), replicas, 64);
    const ElementRange mine = shards[static_cast<size_t>(world.rank())];
    TraceRecorder trace(true, world.rank());
    GradientBucketOptions options;
    options.bucket_bytes = 1000;
    options.scale = 0.5f;
    options.shards = {shards};
    GradientBuckets buckets({grads}, &world, options, &trace);
    for (int64_t i = 0; i < grads.numel(); ++i) grads.data()[i] = static_cast<float>((world.rank() + 1) * (i % 5));
    for (int s = last; s >= 0; --s) buckets.mark_ready(s);
    buckets.finish();
    VP_REQUIRE(buckets.stats().sharded && buckets.stats().bytes == static_cast<size_t>(grads.numel()) * 4,
               "stats: every gradient byte reduce-scattered");
    for (int64_t i = mine.begin; i < mine.end; ++i) {
      VP_REQUIRE(grads.data()[i] == 0.5f * 6.0f * static_cast<float>(i % 5), "rank ", world.rank(), " element ", i,
                 " of its shard: ", grads.data()[i]);
    }
    // The owners' "updated parameters": value = owner rank + 1; everyone else holds garbage until the gather.
    for (int64_t i = 0; i < params.numel(); ++i) {
      params.data()[i] = mine.contains(i) ? static_cast<float>(world.rank() + 1) : -1.0f;
    }
    ParameterGather gather({params}, buckets.buckets(), &world, &trace);
    gather.start();
    VP_REQUIRE(gather.in_flight(), "in flight after start");
    for (int s = 0; s <= last; ++s) VP_REQUIRE(gather.wait_segment(0, s), "segment ", s, " first seen now");
    VP_REQUIRE(!gather.in_flight() && !gather.wait_segment(0, 0), "complete once every segment was waited for");
    for (size_t r = 0; r < shards.size(); ++r) {
      for (int64_t i = shards[r].begin; i < shards[r].end; ++i) {
        VP_REQUIRE(params.data()[i] == static_cast<float>(r + 1), "rank ", world.rank(), " element ", i, " from ", r);
      }
    }
    VP_REQUIRE(gather.stats().bytes == static_cast<size_t>(params.numel()) * 4, "gathered bytes");
    int scattered = 0, gathered = 0;
    for (const auto& e : trace.events()) {
      scattered += e.name == "reduce-scatter" && e.bytes > 0 ? 1 : 0;
      gathered += e.name == "all-gather" && e.bytes > 0 ? 1 : 0;
    }
    VP_REQUIRE(scattered == static_cast<int>(buckets.buckets().size()) && gathered == scattered,
               "trace events with bytes: ", scattered, " reduce-scatter, ", gathered, " all-gather");
  });
  EXPECT_EQ(error, "");
}

}  // namespace
}  // namespace vitpipe
