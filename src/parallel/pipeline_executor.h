// The one interpreter of pipeline schedules (parallel/schedule.h): it runs this rank's instruction list for a step on
// its model chunks (ViTStage), moving activations and gradients with non-blocking messages (NCCL send / recv between
// GPUs, nccl_stage_exchange.h), the labels from the first stage to the last, and reducing gradients across replicas in
// buckets that start while the backward pass still runs. One process with one stage is the same code with every message
// local, so single-process training and pipeline x data parallelism share one path.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/nccl_group.h"
#include "model/vit_stage.h"
#include "parallel/communication_stats.h"
#include "parallel/communicator.h"
#include "parallel/gradient_buckets.h"
#include "parallel/nccl_stage_exchange.h"
#include "parallel/optimizer_shards.h"
#include "parallel/parameter_gather.h"
#include "parallel/process_grid.h"
#include "parallel/schedule.h"
#include "parallel/trace.h"

namespace vitpipe {

// One micro-batch as the first stage loads it.
struct MicroBatchData {
  Tensor images;                 // [b, C, S, S] f32
  Tensor targets;                // [b, L] f32 (multi-label) or [b] int64 (single-label)
  Tensor weights;                // [b, L] f32 label weights (1 known, 0 masked) when the step has them, else empty
  std::vector<int64_t> indices;  // dataset items (reported with the logits in evaluation)
};

// Called on first-stage ranks for micro-batch j of the current step (j in [0, micro_batches)).
using MicroBatchSource = std::function<MicroBatchData(int micro_batch)>;
// Called on last-stage ranks in evaluation with each micro-batch's logits [b, L], targets, label weights (empty when
// the step has none) and dataset items.
using LogitsSink = std::function<void(const Tensor& logits, const Tensor& targets, const Tensor& weights,
                                      const std::vector<int64_t>& items)>;

struct StepShape {
  std::vector<int64_t> micro_batch_sizes;  // this replica's (every entry >= 1)
  int64_t global_rows = 0;                 // samples in the whole global batch (all replicas): the loss's mean
  // Multi-label with masked labels: the sum of the label weights over the whole global batch (all replicas), the
  // denominator of the loss's weighted mean, so that every layout computes the one-process gradient. Negative: the
  // step carries no weights (every label known; the denominator is global_rows x labels).
  double global_label_weight = -1;

  bool has_label_weights() const { return global_label_weight >= 0; }
};

struct StepResult {
  double loss_sum = 0;        // last stage: the loss summed over this replica's elements (others: 0)
  int64_t loss_elements = 0;  // the matching count (known labels, or rows x labels, for multi-label; rows otherwise)
  double seconds = 0;
  double compute_seconds = 0;  // forward + backward on this rank
  GradientReductionStats reduction;
  CommunicationStats comm;  // this rank's, this step (the parameter all-gather its forward waited for included)
};

struct ExecutorOptions {
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int virtual_stages = 1;
  GradientBucketOptions buckets;
  Tensor pos_weight;  // optional [labels] f32: BCE positive-class weights (multi-label)
  // --shard-optimizer: per chunk, every replica's shard of its range (optimizer_shards.h), by data-parallel rank.
  // Gradients are then reduce-scattered to the owners, and start_parameter_gather() all-gathers the parameters.
  std::vector<std::vector<ElementRange>> shards;
  // The replicas' gradients reduced by NCCL on the GPUs (an NcclGroup per chunk over the data-parallel group, made
  // here, collectively) instead of through host mirrors over MPI. Only for chunks on the CUDA module's backend on a
  // real GPU (backend/nccl_group.h refuses any other); the trainer sets it for --device cuda.
  bool nccl_gradients = false;
  // Stages exchange activations and their gradients with NCCL send / recv on their GPUs (nccl_stage_exchange.h)
  // instead of host copies and MPI messages, for every schedule. Only for the CUDA module's backend on a real GPU,
  // with a rank's chunks on one backend (one stream, which the one communicator orders). The trainer sets it for
  // --device cuda.
  bool nccl_stages = false;
};

// Activation slots a stage needs for this schedule (the most micro-batches it holds at once; 1F1B: <= stages).
int activation_slots_needed(ScheduleKind kind, int stages, int micro_batches, int stage, int virtual_stages = 1);

class PipelineExecutor {
 public:
  // `chunks`: this rank's model chunks in chunk order (one unless interleaved). `world`: every rank of the job;
  // the pipeline and data-parallel groups are split from it (collective: every rank constructs an executor).
  PipelineExecutor(const ProcessGrid& grid, Communicator& world, std::vector<ViTStage*> chunks, ExecutorOptions options,
                   TraceRecorder* trace);
  ~PipelineExecutor();

  const ProcessGrid& grid() const { return grid_; }
  Communicator& pipeline_group() { return *pipeline_group_; }
  Communicator& data_parallel_group() { return *data_parallel_group_; }

  // Forward and backward passes of one step as the schedule says. `shape` matters on first-stage ranks (it is
  // sent down the pipeline); `source` is called there only. On return every chunk's gradients hold the sum over
  // the step's micro-batches and replicas, scaled so that it is the gradient of the global batch's mean loss.
  StepResult train_step(const StepShape& shape, const MicroBatchSource& source);

  // Forward passes only (evaluation), micro-batch after micro-batch; `sink` is called on last-stage ranks.
  void forward_only(const StepShape& shape, const MicroBatchSource& source, const LogitsSink& sink);

  // Sharded optimizer: after every replica updated its shard, broadcasts each bucket from its owner; the next
  // step's first forward waits for each segment just before computing it (and refreshes its bf16 copy).
  void start_parameter_gather();
  // Waits for whatever of the gather is left (before reading the parameters outside a training step: evaluation,
  // checkpoints, exports). A no-op when nothing is in flight.
  void complete_parameters();
  bool sharded() const { return !options_.shards.empty(); }
  // The NCCL stage exchange, when activations travel device to device (null otherwise).
  const NcclStageExchange* stage_exchange() const { return stage_exchange_.get(); }

 private:
  struct Pending;
  void exchange_shape(StepShape& shape);
  int chunk_of_virtual(int virtual_stage) const;
  void run(const std::vector<Instruction>& program, const StepShape& shape, const MicroBatchSource& source,
           const LogitsSink* sink, StepResult* result);

  ProcessGrid grid_;
  Communicator& world_;
  std::unique_ptr<Communicator> pipeline_group_;
  std::unique_ptr<Communicator> data_parallel_group_;
  std::vector<ViTStage*> chunks_;
  ExecutorOptions options_;
  TraceRecorder* trace_;
  std::unique_ptr<NcclStageExchange> stage_exchange_;    // null: activations travel through host memory and MPI
  std::vector<std::unique_ptr<NcclGroup>> nccl_groups_;  // before buckets_: they outlive the buckets using them
  std::unique_ptr<GradientBuckets> buckets_;
  std::unique_ptr<ParameterGather> gather_;
};

}  // namespace vitpipe
