// `vitpipe plan` and `train --layout auto`: the planner's inputs (plan/layout_search.h) from train's own options and
// the job around them: how many processes, how many share a node, the memory each may use and the link. Rank 0
// profiles (cached) and plans while the other ranks wait without spinning; every rank then applies the same layout.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "parallel/communicator.h"
#include "parallel/host_topology.h"
#include "plan/layout_search.h"
#include "plan/node_split_choice.h"
#include "train/train_options.h"

namespace vitpipe {

struct PlanJob {
  int processes = 1;
  int nodes = 1;  // processes are spread evenly; those on one node share its cores and memory
  int processes_per_node() const { return (processes + nodes - 1) / nodes; }
};

// "16GiB", "512MiB", "1.5GB", "2G", or plain bytes. Throws naming `where` and the expected form.
double parse_memory_size(std::string_view text, const std::string& where);
double machine_memory_bytes();  // MemTotal of /proc/meminfo

// Each optimizer's phase cost per element (the gradient norm's pass, the update, zeroing the gradients: what the
// trainer does after the backward), measured on one block's parameters (segment_profile.h's timer). With `backend`
// (a GPU's) on its memory, the device waited for at the end of each timed run; else on the host.
std::map<std::string, double> time_optimizers(const std::shared_ptr<const ParameterLayout>& layout,
                                              Backend* backend = nullptr);

// config.json of --model (no weights read) with --image-size applied; the labels as the checkpoint has them.
ViTConfig model_config_for_plan(const TrainOptions& options);

// The planner's inputs. `constrained`: the layout flags given explicitly fix that part of the search (plan);
// otherwise everything is searched (train --layout auto, which refuses those flags). Threads per process:
// --threads, else the node's cores shared by its processes. With --device cuda (or auto finding a GPU): more
// processes per node than GPUs is refused in one line; the memory per process is the GPU's free memory less a margin
// (plan/gpu_memory_budget.h; --memory-per-process replaces it), under mpirun this rank's GPU (the caller takes the
// least over the ranks); the link between a node's GPUs without --link is the labelled assumption of
// plan/link_model.h (nothing here measures NCCL yet).
PlanInputs plan_inputs(const TrainOptions& options, const ViTConfig& config, const PlanJob& job, const LinkModel& link,
                       bool constrained);

// Profiles (or reads the cache) and plans. Throws, saying what would fit, when no layout fits the memory given.
// `corunning_ranks`, `together`, `work_known`, `combine`, `alone`: profiling alongside other ranks
// (segment_profile.h). `profile` (optional) receives the profile planned with.
Plan make_plan(const PlanInputs& inputs, const TrainOptions& options, bool* profiled = nullptr, int corunning_ranks = 1,
               int together = 1, const std::function<void(const ProfileWork&)>& work_known = {},
               const ProfileCombine& combine = {}, const AloneTurn& alone = {}, ModelProfile* profile = nullptr);

// Collective over `world`: rank 0 profiles (unless cached) and plans while every other rank measures the same work
// at the same time (the slowest rank's times kept), after rank 0 measured alone while the others slept; rank 0 gets
// the plan, the others nullopt. `corunning_ranks`:
// the ranks of this job on rank 0's node.
std::optional<Plan> make_plan_alongside(Communicator& world, const PlanInputs& inputs, const TrainOptions& options,
                                        int corunning_ranks, bool* profiled = nullptr, ModelProfile* profile = nullptr);

// train --layout auto, collective over `world`: rank 0 times the data path (`time_data_path`, optional: seconds per
// training image) while the others wait without spinning, then every rank profiles the segments at once (unless
// cached), rank 0 plans and prints the chosen layout beside the next best; every rank's layout options in `options`
// are set, and the choice is returned.
// `topology`: which ranks share a host (parallel/host_topology.h): the nodes the plan counts, and the ranks that
// profile at once on rank 0's.
LayoutPrediction choose_training_layout(Communicator& world, TrainOptions& options, const ViTConfig& config,
                                        const HostTopology& topology,
                                        const std::function<double()>& time_data_path = {});

// The ranks x threads one process's `cores` split into (train --layout auto without mpirun, plan without
// --processes): the fastest by the core scaling (--scaling FILE, else the profile cache's core_scaling.json) among the
// rank counts for which some layout fits each rank's memory (--memory-per-process, else the machine's memory shared
// by the ranks; the planner's memory model). nullopt without a scaling profile: one rank of every thread, as before.
// `constrained`: as plan_inputs'. Throws when no split fits.
struct ScaledNodeSplit {
  NodeSplitChoice choice;
  std::string source;  // the scaling profile's path
  std::string describe() const { return describe_node_split(choice, source); }
};
std::optional<ScaledNodeSplit> node_split_from_scaling(const TrainOptions& options, const ViTConfig& config, int cores,
                                                       bool constrained);

// `vitpipe plan`: prints (or writes as JSON) the plan for `options` on `processes` processes (0 = mpirun's, or 1)
// spread over `nodes` (0 = under mpirun the hosts its ranks share memory on, else 1).
// `cores` (0 = this process's threads): what a scaling profile splits when --processes is not given.
void run_plan_command(const TrainOptions& options, int processes, int nodes, int rows, bool json, int cores = 0);

}  // namespace vitpipe
