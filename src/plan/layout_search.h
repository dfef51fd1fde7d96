// The planner behind `vitpipe plan` and `train --layout auto`: from the model, the global batch, the processes,
// the memory each may use and the link between them, it searches pipeline stages x data-parallel replicas x
// micro-batch size x schedule x recompute x optimizer sharding. Each candidate gets stage boundaries balanced by
// the measured cost of its segments (segment_profile.h: the embeddings and the head do not weigh what a block
// weighs), then a predicted step: the schedule simulator (parallel/schedule.h) plays the stages' measured forward,
// B and W times with messages costed by the link model, the gradient reduction's exposed part and the optimizer are
// added; memory per rank comes from the memory plan (memory_model.h). Layouts that fit are ranked by predicted
// step time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/precision.h"
#include "model/vit_config.h"
#include "parallel/process_grid.h"
#include "parallel/schedule.h"
#include "plan/gpu_memory_budget.h"
#include "plan/link_model.h"
#include "plan/memory_model.h"
#include "plan/segment_profile.h"

namespace vitpipe {

struct PlanInputs {
  ViTConfig config;  // image size, labels, problem type applied
  Precision precision = Precision::fp32;
  TrainingMode mode;  // as profiled: frozen segments below the backward path run forward only
  int64_t global_batch = 1;
  int processes = 1;
  int processes_per_node = 1;   // share a node's cores (oversubscription slows every rank's compute)
  int cores_per_node = 1;       // the cores the processes may run on (affinity mask)
  int threads_per_process = 1;  // as profiled
  // The data path: the loader's CPU time per training image (decode or packed-cache read, augmentation; 0 = not
  // measured) and its threads per first-stage rank. Prefetched, it is hidden while the node has a core to spare;
  // on a node whose cores the ranks' threads already fill it takes its CPU time from the compute.
  double data_seconds_per_image = 0;
  int loader_threads = 2;
  double memory_per_process = 0;  // bytes
  LinkModel link;
  // Between the ranks of one node (shared memory) when the job spans nodes; bandwidth 0 = `link` everywhere.
  LinkModel local_link;
  std::string optimizer = "adamw";  // moments: 2 buffers (adamw, lamb), 1 (sgd with momentum)
  int optimizer_buffers = 2;
  // Constraints from flags given explicitly (plan only; train --layout auto refuses them).
  std::optional<int> stages;
  std::optional<int64_t> micro_batch;
  std::optional<ScheduleKind> schedule;
  std::optional<int> virtual_stages;
  std::optional<bool> recompute;
  std::optional<bool> shard;
  std::vector<int> layers_per_stage;  // fixed boundaries (with stages)
  int64_t max_micro_batch = 32;       // largest size profiled
  // Planning for --device cuda: each rank also holds the CUDA backend's workspaces (memory_model.h), and
  // memory_per_process is device memory (plan/gpu_memory_budget.h): the host's (the process overhead, the loader's
  // batches) is not counted against it. Ranks compute on their own GPUs, so the CPU's core sharing (slowdown,
  // reductions with no core to spare) does not apply.
  bool cuda = false;
  int gpus_per_node = 0;                      // cuda: the GPUs one node has (ranks per node never exceed it)
  std::string memory_source;                  // how memory_per_process was obtained, for the printout
  std::optional<GpuMemoryBudget> gpu_memory;  // cuda without --memory-per-process: what the driver said
};

struct Layout {
  int stages = 1;
  int replicas = 1;
  int64_t micro_batch = 1;
  int micro_batches = 1;  // per step, per replica
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int virtual_stages = 1;
  bool recompute = false;
  bool shard = false;
  std::vector<int> layers_per_stage;  // encoder blocks per (virtual) stage
  // Across nodes: the rank order with fewer bytes between them (plan/rank_placement.h), as train chooses it.
  RankOrder rank_order = RankOrder::replica_major;

  std::string describe() const;  // "2 stages x 4 replicas, micro-batch 2 x 8, zb-h1, sharded"
  // The train flags that give this layout ("--pipeline-stages 2 --layers-per-stage 6,6 ...").
  std::vector<std::string> train_flags() const;
};

// Bytes one step moves, the whole job together (payloads), and a ring algorithm's bytes on the links.
struct StepVolume {
  double activations = 0, activation_grads = 0, labels = 0, allreduce = 0, reduce_scatter = 0, allgather = 0;
  double wire = 0;
};

struct LayoutPrediction {
  Layout layout;
  double step_seconds = 0;                   // one optimizer step, optimizer included
  double pipeline_seconds = 0;               // the simulated forward/backward makespan
  double bubble = 0;                         // simulated, mean over stages
  double exposed_communication_seconds = 0;  // gradient reduction and parameter gather not hidden, worst stage
  double optimizer_seconds = 0;
  double data_seconds = 0;              // the data path's share of the step (not hidden by prefetching)
  std::vector<PassTimes> stage_passes;  // per stage: one micro-batch's passes as simulated (slowdown included)
  RankMemory memory;                    // of the rank needing the most
  StepVolume volume;
  double cross_node_bytes = 0;  // of `volume`, what crosses between nodes (the rank order's)
  bool fits = false;
};

struct Plan {
  std::vector<LayoutPrediction> ranked;          // the layouts that fit, fastest first
  std::optional<LayoutPrediction> least_memory;  // over every layout searched (the hint when none fits)
  int searched = 0;
};

// The micro-batch sizes the search may use (to profile them first).
std::vector<int64_t> candidate_micro_batches(const PlanInputs& inputs);

Plan plan_layouts(const PlanInputs& inputs, const ModelProfile& profile);

// A pass measured `alone` and `together` (every one of `ranks` ranks of `threads` at once), costed with `share` of
// the other ranks computing meanwhile. Where the measurement shows the ranks time-slicing `cores` cores (together
// at least 3/4 of the oversubscription over alone, as namespaced hosts on one machine do), the slicing applies only
// to the threads beyond the cores and the rest (memory bandwidth, caches) grows with the ranks running; otherwise
// the whole difference grows with them.
double between_alone_and_together(double alone, double together, double share, int ranks, int threads, int cores);

// The prediction for one given layout (boundaries balanced by cost when layers_per_stage is empty).
LayoutPrediction predict_layout(const PlanInputs& inputs, const ModelProfile& profile, Layout layout);

// What would fit when nothing does: the least memory any layout of these processes needs, and the fewest
// processes (up to 64 x) at which some layout fits the given memory. One line, for the error message.
std::string what_would_fit(const PlanInputs& inputs, const ModelProfile& profile, const Plan& plan);

// The chosen layout and the next best, as the table `vitpipe plan` prints; plan_json the same as JSON.
std::string format_plan(const PlanInputs& inputs, const Plan& plan, int rows);
nlohmann::json plan_json(const PlanInputs& inputs, const Plan& plan, int rows);
nlohmann::json prediction_json(const LayoutPrediction& prediction);

}  // namespace vitpipe
