#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parallel/process_grid.h"
#include "util/error.h"

namespace vitpipe {
namespace {

std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR_CONTAINS(statement, text)                                    \
  do {                                                                            \
    const std::string message_ = error_of([&] { statement; });                    \
    EXPECT_NE(message_.find(text), std::string::npos) << "message: " << message_; \
  } while (0)

TEST(ProcessGrid, EightRanksAsFourStagesTimesTwoReplicas) {
  for (int rank = 0; rank < 8; ++rank) {
    ProcessGrid grid(8, rank, 4);
    EXPECT_EQ(grid.replicas(), 2);
    EXPECT_EQ(grid.stage(), rank % 4);
    EXPECT_EQ(grid.replica(), rank / 4);
    EXPECT_EQ(grid.rank_of(grid.stage(), grid.replica()), rank);
    EXPECT_EQ(grid.first_stage(), rank % 4 == 0);
    EXPECT_EQ(grid.last_stage(), rank % 4 == 3);
  }
  ProcessGrid grid(8, 5, 4);  // stage 1, replica 1
  EXPECT_EQ(grid.previous_rank(), 4);
  EXPECT_EQ(grid.next_rank(), 6);
  EXPECT_EQ(grid.data_parallel_ranks(), (std::vector<int>{1, 5}));
  EXPECT_EQ(grid.pipeline_ranks(), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(grid.rank_of_virtual_stage(6), 6);  // chunk 1 of stage 2
  EXPECT_EQ(grid.rank_of_virtual_stage(4), 4);  // chunk 1 of stage 0: wraps to the front
  EXPECT_EQ(grid.describe(), "rank 5: stage 1 of 4, replica 1 of 2");
  EXPECT_EQ(ProcessGrid(8, 4, 4).previous_rank(), -1);
  EXPECT_EQ(ProcessGrid(8, 3, 4).next_rank(), -1);
  EXPECT_EQ(grid.stage_of(7), 3);
  EXPECT_EQ(grid.replica_of(7), 1);
}

TEST(ProcessGrid, StageMajorMakesAStagesReplicasNeighbours) {
  // 2 stages x 3 replicas, rank = stage * 3 + replica: ranks 0-2 hold stage 0, ranks 3-5 stage 1.
  for (int rank = 0; rank < 6; ++rank) {
    const ProcessGrid grid(6, rank, 2, RankOrder::stage_major);
    EXPECT_EQ(grid.stage(), rank / 3);
    EXPECT_EQ(grid.replica(), rank % 3);
    EXPECT_EQ(grid.rank_of(grid.stage(), grid.replica()), rank);
    EXPECT_EQ(grid.data_parallel_ranks(),
              (std::vector<int>{3 * grid.stage(), 3 * grid.stage() + 1, 3 * grid.stage() + 2}));
    EXPECT_EQ(grid.pipeline_ranks(), (std::vector<int>{grid.replica(), 3 + grid.replica()}));
    EXPECT_EQ(grid.previous_rank(), grid.first_stage() ? -1 : rank - 3);
    EXPECT_EQ(grid.next_rank(), grid.last_stage() ? -1 : rank + 3);
  }
  EXPECT_EQ(ProcessGrid(6, 4, 2, RankOrder::stage_major).describe(),
            "rank 4: stage 1 of 2, replica 1 of 3 (ranks stage-major)");
}

TEST(ProcessGrid, OneProcessIsOneStageOneReplica) {
  ProcessGrid grid(1, 0, 1);
  EXPECT_TRUE(grid.first_stage());
  EXPECT_TRUE(grid.last_stage());
  EXPECT_EQ(grid.previous_rank(), -1);
  EXPECT_EQ(grid.next_rank(), -1);
  EXPECT_EQ(grid.data_parallel_ranks(), (std::vector<int>{0}));
  ProcessGrid data_parallel(4, 2, 1);
  EXPECT_EQ(data_parallel.data_parallel_ranks(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(data_parallel.replica(), 2);
}

TEST(ProcessGrid, RefusesBadGrids) {
  EXPECT_ERROR_CONTAINS(ProcessGrid(6, 0, 4), "cannot arrange 6 processes into 4 pipeline stages");
  EXPECT_ERROR_CONTAINS(ProcessGrid(4, 4, 2), "rank 4 is outside [0, 4)");
  EXPECT_ERROR_CONTAINS(ProcessGrid(4, 0, 0), "--pipeline-stages must be at least 1");
  EXPECT_ERROR_CONTAINS(ProcessGrid(4, 0, 2).rank_of(2, 0), "outside the grid");
}

TEST(LayerSplit, EvenSplit) {
  EXPECT_EQ(even_blocks_per_piece(12, 4), (std::vector<int>{3, 3, 3, 3}));
  EXPECT_EQ(even_blocks_per_piece(12, 5), (std::vector<int>{2, 3, 3, 2, 2}));
  EXPECT_EQ(even_blocks_per_piece(13, 4), (std::vector<int>{3, 4, 3, 3}));
  EXPECT_EQ(even_blocks_per_piece(12, 1), (std::vector<int>{12}));
  EXPECT_EQ(even_blocks_per_piece(3, 2), (std::vector<int>{1, 2}));
  EXPECT_EQ(even_blocks_per_piece(2, 4), (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(even_blocks_per_piece(3, 4), (std::vector<int>{0, 1, 1, 1}));
  // The Graphcore layout: 12 layers, 4 stages -> embeddings + 3, 3, 3, 3 + head.
  auto ranges = split_segments(12, 4);
  ASSERT_EQ(ranges.size(), 4u);
  EXPECT_EQ(ranges[0], (SegmentRange{0, 3}));
  EXPECT_EQ(ranges[1], (SegmentRange{4, 6}));
  EXPECT_EQ(ranges[2], (SegmentRange{7, 9}));
  EXPECT_EQ(ranges[3], (SegmentRange{10, 13}));
  EXPECT_EQ(split_segments(12, 1), (std::vector<SegmentRange>{{0, 13}}));
  // Two layers on four stages: the embeddings and the head stand alone.
  EXPECT_EQ(split_segments(2, 4), (std::vector<SegmentRange>{{0, 0}, {1, 1}, {2, 2}, {3, 3}}));
}

TEST(LayerSplit, EveryEvenSplitCoversAllSegmentsOnceWithNonEmptyPieces) {
  for (int layers = 0; layers <= 14; ++layers) {
    for (int pieces = 1; pieces <= layers + 2; ++pieces) {
      auto ranges = split_segments(layers, pieces);
      ASSERT_EQ(static_cast<int>(ranges.size()), pieces);
      int next = 0;
      int smallest = 1 << 30, largest = 0;
      for (const auto& r : ranges) {
        EXPECT_EQ(r.first, next) << layers << " layers, " << pieces << " pieces";
        EXPECT_GE(r.count(), 1);
        next = r.last + 1;
      }
      EXPECT_EQ(next, layers + 2);
      for (int b : even_blocks_per_piece(layers, pieces)) {
        smallest = std::min(smallest, b);
        largest = std::max(largest, b);
      }
      EXPECT_LE(largest - smallest, 1) << layers << " layers, " << pieces << " pieces";
    }
  }
}

TEST(LayerSplit, ExplicitLayersPerStage) {
  auto ranges = split_segments(12, 4, {4, 4, 3, 1});
  EXPECT_EQ(ranges, (std::vector<SegmentRange>{{0, 4}, {5, 8}, {9, 11}, {12, 13}}));
  // The first and last stages may hold no block: embeddings, head.
  EXPECT_EQ(split_segments(2, 3, {0, 2, 0}), (std::vector<SegmentRange>{{0, 0}, {1, 2}, {3, 3}}));
  EXPECT_ERROR_CONTAINS(split_segments(12, 4, {3, 3, 3}),
                        "--layers-per-stage 3,3,3 has 3 entries but the pipeline has 4 (virtual) stages");
  EXPECT_ERROR_CONTAINS(split_segments(12, 4, {3, 3, 3, 2}),
                        "--layers-per-stage 3,3,3,2 sums to 11 but the model has 12 encoder layers");
  EXPECT_ERROR_CONTAINS(split_segments(12, 4, {6, 0, 3, 3}),
                        "gives stage 1 no encoder layer: only the first stage (embeddings) and the last (head)");
  EXPECT_ERROR_CONTAINS(split_segments(12, 4, {7, -1, 3, 3}), "entry 2 is negative");
}

TEST(LayerSplit, ParseLayersPerStage) {
  EXPECT_EQ(parse_layers_per_stage("3,3,3,3"), (std::vector<int>{3, 3, 3, 3}));
  EXPECT_EQ(parse_layers_per_stage(" 4, 2 ,6"), (std::vector<int>{4, 2, 6}));
  EXPECT_EQ(parse_layers_per_stage("12"), (std::vector<int>{12}));
  EXPECT_ERROR_CONTAINS(parse_layers_per_stage("3,x,3"), "entry 2 ('x') is not an integer");
  EXPECT_ERROR_CONTAINS(parse_layers_per_stage("3,,3"), "entry 2 ('') is not an integer");
  EXPECT_ERROR_CONTAINS(parse_layers_per_stage("3,3,"), "entry 3 ('') is not an integer");
  EXPECT_ERROR_CONTAINS(parse_layers_per_stage("3.5"), "entry 1 ('3.5') is not an integer");
}

ParallelConfig config(int world, int stages, int layers, int micro_batch, int global_batch) {
  ParallelConfig c;
  c.world_size = world;
  c.stages = stages;
  c.layers = layers;
  c.micro_batch = micro_batch;
  c.global_batch = global_batch;
  return c;
}

TEST(ParallelConfig, ValidPlans) {
  // Graphcore's notebook: 4 stages, micro-batch 1, 128 micro-batches (gradient accumulation).
  ParallelPlan plan = validate_parallel_config(config(4, 4, 12, 1, 128));
  EXPECT_EQ(plan.replicas, 1);
  EXPECT_EQ(plan.micro_batches, 128);
  EXPECT_EQ(plan.segments_of(3), (SegmentRange{10, 13}));
  EXPECT_EQ(plan.describe(),
            "stage 0: segments 0..3 (embeddings, encoder layers 0..2)\n"
            "stage 1: segments 4..6 (encoder layers 3..5)\n"
            "stage 2: segments 7..9 (encoder layers 6..8)\n"
            "stage 3: segments 10..13 (encoder layers 9..11, head)\n");
  plan = validate_parallel_config(config(8, 2, 12, 4, 64));  // 2 stages x 4 replicas, 4 micro-batches each
  EXPECT_EQ(plan.replicas, 4);
  EXPECT_EQ(plan.micro_batches, 4);
  auto interleaved = config(2, 2, 12, 2, 8);
  interleaved.schedule = ScheduleKind::interleaved_1f1b;
  interleaved.virtual_stages = 2;
  plan = validate_parallel_config(interleaved);
  ASSERT_EQ(plan.pieces.size(), 4u);
  EXPECT_EQ(plan.segments_of(0, 1), (SegmentRange{7, 9}));  // virtual stage 2
  EXPECT_EQ(plan.segments_of(1, 1), (SegmentRange{10, 13}));
  EXPECT_EQ(validate_parallel_config(config(1, 1, 12, 32, 32)).micro_batches, 1);
}

TEST(ParallelConfig, RefusesEachBadConfiguration) {
  EXPECT_ERROR_CONTAINS(validate_parallel_config(config(6, 4, 12, 1, 64)),
                        "cannot arrange 6 processes into 4 pipeline stages: the number of processes (mpirun -np) "
                        "must be a multiple of --pipeline-stages");
  EXPECT_ERROR_CONTAINS(validate_parallel_config(config(15, 15, 12, 1, 64)),
                        "--pipeline-stages 15 is more stages than the model has pieces: 12 encoder layers + "
                        "embeddings + head allow at most 14 stages");
  EXPECT_NO_THROW(validate_parallel_config(config(14, 14, 12, 1, 14)));
  EXPECT_ERROR_CONTAINS(validate_parallel_config(config(4, 4, 12, 4, 8)),
                        "global batch size 8 / (micro-batch size 4 x 1 replicas) = 2 micro-batches per step, fewer "
                        "than the 4 pipeline stages");
  EXPECT_ERROR_CONTAINS(validate_parallel_config(config(4, 2, 12, 4, 20)),
                        "global batch size 20 is not divisible by micro-batch size 4 x 2 replicas = 8");
  EXPECT_ERROR_CONTAINS(validate_parallel_config(config(4, 0, 12, 4, 20)), "--pipeline-stages must be at least 1");
  EXPECT_ERROR_CONTAINS(validate_parallel_config(config(4, 2, 12, 0, 20)), "--micro-batch-size must be at least 1");
  EXPECT_ERROR_CONTAINS(validate_parallel_config(config(4, 2, 12, 1, 0)), "global batch size must be at least 1");
  auto explicit_split = config(4, 4, 12, 1, 16);
  explicit_split.layers_per_stage = {3, 3, 3, 4};
  EXPECT_ERROR_CONTAINS(validate_parallel_config(explicit_split), "sums to 13 but the model has 12");
  explicit_split.layers_per_stage = {3, 3, 6};
  EXPECT_ERROR_CONTAINS(validate_parallel_config(explicit_split), "has 3 entries but the pipeline has 4");
  auto interleaved = config(2, 2, 12, 2, 6);
  interleaved.schedule = ScheduleKind::interleaved_1f1b;
  interleaved.virtual_stages = 2;
  EXPECT_ERROR_CONTAINS(validate_parallel_config(interleaved),
                        "needs micro-batches per step (3) to be a multiple of the 2 pipeline stages");
  interleaved.global_batch = 8;
  interleaved.virtual_stages = 8;
  EXPECT_ERROR_CONTAINS(validate_parallel_config(interleaved), "2 x 8 virtual stages = 16 model chunks");
  auto one_stage_interleaved = config(1, 1, 12, 2, 8);
  one_stage_interleaved.schedule = ScheduleKind::interleaved_1f1b;
  one_stage_interleaved.virtual_stages = 2;
  EXPECT_ERROR_CONTAINS(validate_parallel_config(one_stage_interleaved),
                        "--pipeline-schedule interleaved needs at least 2 pipeline stages");
  one_stage_interleaved.virtual_stages = 1;  // one chunk: nothing to hand over
  EXPECT_NO_THROW(validate_parallel_config(one_stage_interleaved));
  auto not_interleaved = config(2, 2, 12, 1, 8);
  not_interleaved.virtual_stages = 2;
  EXPECT_ERROR_CONTAINS(validate_parallel_config(not_interleaved), "virtual stages per rank must be 1");
}

}  // namespace
}  // namespace vitpipe
