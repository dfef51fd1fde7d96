// `vitpipe plan`: the pipeline x data-parallel layout for a training job (see train/layout_auto.h). Takes train's own
// flags (the layout flags given fix that part of the search) plus the job's size.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/device_flag.h"
#include "plan/core_scaling.h"
#include "plan/node_split_choice.h"
#include "train/layout_auto.h"
#include "train/train_options.h"
#include "util/error.h"
#include "util/threads.h"

namespace vitpipe::cli {
namespace {

// --scaling FILE without --model: the node's cores split into ranks x threads by each operation's measured scaling.
void run_node_split(const std::string& path, int cores, bool json) {
  const CoreScaling scaling = read_core_scaling_file(path, "--scaling");
  const int node_cores = cores > 0 ? cores : available_cores();
  const std::vector<NodeSplit> splits = rank_node_splits(scaling, node_cores);
  if (!json) {
    std::printf("%s", format_node_splits(scaling, node_cores, splits).c_str());
    return;
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& n : splits)
    rows.push_back({{"ranks", n.ranks},
                    {"threads", n.threads},
                    {"step_seconds", n.step_seconds},
                    {"allreduce_seconds", n.allreduce_seconds},
                    {"images_per_s", n.images_per_s}});
  std::printf("%s\n", nlohmann::json{{"cores", node_cores}, {"node_splits", rows}}.dump().c_str());
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan",
      "Choose stages x replicas, micro-batch, schedule, recompute and optimizer sharding for a training job: profiles "
      "the model's segments once (cached), simulates every layout and prints the fastest that fits beside the next "
      "best. Takes train's flags (--model, --image-size, --precision, --batch-size, --optimizer, ...); layout flags "
      "given fix that part of the search. With --device cuda it profiles on this process's GPU (cached per GPU and "
      "CUDA library versions), budgets each rank the GPU's free memory less a margin of 5% (at least 1 GiB; "
      "--memory-per-process replaces it) with the CUDA libraries' workspaces counted, plans at most one rank per GPU "
      "of a node, and without --link assumes PCIe 4.0 rates between a node's GPUs (printed as an assumption)");
  auto parser = add_train_options(cmd);
  struct Flags {
    int processes = 0;
    int nodes = 0;
    int top = 6;
    bool json = false;
    int cores = 0;
  };
  auto flags = std::make_shared<Flags>();
  cmd->add_option("--processes", flags->processes, "Processes of the job (default: mpirun's, else 1)")->type_name("N");
  cmd->add_option("--nodes", flags->nodes,
                  "Machines the processes are spread over; those on one share its cores and memory (default 0: under "
                  "mpirun the hosts its ranks share memory on, else 1)")
      ->type_name("K");
  cmd->add_option("--top", flags->top, "Layouts to print (default 6)")->type_name("N");
  cmd->add_flag("--json", flags->json, "Print the plan as JSON");
  cmd->add_option("--cores", flags->cores,
                  "With --scaling: the node's cores it splits into ranks x threads (default 0: this process's threads)")
      ->type_name("N");
  cmd->callback([parser, flags] {
    const TrainOptions options = parser->resolve(false);
    // --scaling FILE alone (train's flag, without --model): only the node split; with --model (and no
    // --processes) the plan runs on the ranks x threads it chooses.
    if (!options.scaling.empty() && options.model.empty()) {
      run_node_split(options.scaling, flags->cores, flags->json);
      return;
    }
    resolve_device(options.device);  // plan profiles the device it plans for: a cuda that cannot run says so first
    run_plan_command(options, flags->processes, flags->nodes, flags->top, flags->json, flags->cores);
  });
}

}  // namespace vitpipe::cli
