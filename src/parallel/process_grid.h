// Who does what in a job: the grid of pipeline stages x data-parallel replicas, the model's split into stages, and
// the checks that refuse a bad configuration before any work starts.
//
// Ranks are numbered replica-major by default: rank = replica * stages + stage, so one pipeline's stages are
// neighbouring ranks (usually on one node) and the gradient all-reduce groups the same stage of every replica.
// Stage-major (rank = stage * replicas + replica) makes a stage's replicas the neighbours instead: across hosts,
// the gradient reduction then stays inside a host and the activations cross (rank_placement.h chooses).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/schedule.h"

namespace vitpipe {

class Communicator;

enum class RankOrder { replica_major, stage_major };
const char* rank_order_name(RankOrder order);  // "replica-major", "stage-major"

class ProcessGrid {
 public:
  // Throws vitpipe::Error unless 1 <= stages, world_size % stages == 0 and 0 <= rank < world_size.
  ProcessGrid(int world_size, int rank, int stages, RankOrder order = RankOrder::replica_major);

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  int stages() const { return stages_; }
  int replicas() const { return world_size_ / stages_; }
  RankOrder order() const { return order_; }
  int stage() const { return stage_of(rank_); }
  int replica() const { return replica_of(rank_); }
  bool first_stage() const { return stage() == 0; }
  bool last_stage() const { return stage() == stages_ - 1; }

  int rank_of(int stage, int replica) const;  // throws when outside the grid
  int stage_of(int rank) const;
  int replica_of(int rank) const;

  // Neighbours in my pipeline (same replica); -1 at the ends.
  int previous_rank() const { return first_stage() ? -1 : rank_of(stage() - 1, replica()); }
  int next_rank() const { return last_stage() ? -1 : rank_of(stage() + 1, replica()); }
  // The rank of my replica that holds virtual stage `virtual_stage` (interleaved: chunk * stages + stage).
  int rank_of_virtual_stage(int virtual_stage) const { return rank_of(virtual_stage % stages_, replica()); }

  std::vector<int> data_parallel_ranks() const;  // my stage in every replica, by replica (includes me)
  std::vector<int> pipeline_ranks() const;       // every stage of my replica, by stage (includes me)

  std::string describe() const;  // "rank 5: stage 1 of 4, replica 1 of 2"

 private:
  int world_size_ = 1;
  int rank_ = 0;
  int stages_ = 1;
  RankOrder order_ = RankOrder::replica_major;
};

// Collective over `world`: the communicator of my stage across replicas (ranked by replica), for the gradient
// all-reduce. world.split(stage, replica).
std::unique_ptr<Communicator> split_data_parallel_group(Communicator& world, const ProcessGrid& grid);

// Segments of the model, inclusive: 0 = embeddings, 1..L = encoder blocks, L+1 = final norm + head
// (model/parameter_layout.h). A stage (or a virtual stage of interleaved 1F1B) holds one contiguous range.
struct SegmentRange {
  int first = 0;
  int last = -1;
  int count() const { return last - first + 1; }
  bool holds(int segment) const { return segment >= first && segment <= last; }
  bool operator==(const SegmentRange&) const = default;
};

// Encoder blocks per piece when split evenly: floor(L/n) each, the remainder going to the middle pieces first
// (the first piece also runs the patch embedding), then the last, then the first.
std::vector<int> even_blocks_per_piece(int layers, int pieces);
// Segment ranges of `pieces` consecutive pieces holding blocks_per_piece[i] encoder blocks each; piece 0 also holds
// the embeddings and the last piece the head. Empty blocks_per_piece = even split. Validates like
// validate_parallel_config (entry count, sum, non-empty pieces).
std::vector<SegmentRange> split_segments(int layers, int pieces, const std::vector<int>& blocks_per_piece = {});

// "3,3,3,3" -> {3, 3, 3, 3}; throws naming the bad entry.
std::vector<int> parse_layers_per_stage(std::string_view text);

struct ParallelConfig {
  int world_size = 1;    // processes (mpirun -np), or 1
  int stages = 1;        // --pipeline-stages
  int layers = 12;       // the model's encoder blocks (num_hidden_layers)
  int micro_batch = 1;   // --micro-batch-size: samples per micro-batch
  int global_batch = 1;  // samples per optimizer step, all replicas together
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int virtual_stages = 1;             // model chunks per rank; > 1 only for interleaved-1f1b
  std::vector<int> layers_per_stage;  // --layers-per-stage; empty = even split; one entry per (virtual) stage
};

// What a valid configuration implies.
struct ParallelPlan {
  ParallelConfig config;
  int replicas = 1;
  int micro_batches = 1;             // per step, per replica
  std::vector<SegmentRange> pieces;  // per virtual stage (= per stage unless interleaved)

  SegmentRange segments_of(int stage, int chunk = 0) const;  // piece chunk * stages + stage
  std::string describe() const;  // one line per stage: "stage 1: segments 4..6 (encoder layers 3..5)"
};

// Refuses, with a message saying what to change: stages < 1; world size not a multiple of the stages; more
// (virtual) stages than layers + 2; micro-batch or global batch < 1; a global batch not divisible by micro-batch x
// replicas; fewer micro-batches per step than stages; for interleaved-1f1b micro-batches not a multiple of the
// stages; --layers-per-stage with the wrong entry count, a negative entry, a sum other than the layers, or a middle
// stage with no layer. Throws vitpipe::Error.
ParallelPlan validate_parallel_config(const ParallelConfig& config);

}  // namespace vitpipe
