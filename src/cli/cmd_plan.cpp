// `vitpipe plan`: the pipeline x data-parallel layout for a training job (see train/layout_auto.h). Takes train's own
// flags (the layout flags given fix that part of the search) plus the job's size.
#include "cli/commands.h"
#include "cli/device_flag.h"
#include "train/layout_auto.h"
#include "train/train_options.h"

namespace vitpipe::cli {

void add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan",
      "Choose stages x replicas, micro-batch, schedule, recompute and optimizer sharding for a training job: profiles "
      "the model's segments once (cached), simulates every layout and prints the fastest that fits beside the next "
      "best. Takes train's flags (--model, --image-size, --precision, --batch-size, --optimizer, ...); layout flags "
      "given fix that part of the search");
  auto parser = add_train_options(cmd);
  struct Flags {
    int processes = 0;
    int nodes = 0;
    int top = 6;
    bool json = false;
  };
  auto flags = std::make_shared<Flags>();
  cmd->add_option("--processes", flags->processes, "Processes of the job (default: mpirun's, else 1)")->type_name("N");
  cmd->add_option("--nodes", flags->nodes,
                  "Machines the processes are spread over; those on one share its cores and memory (default 0: under "
                  "mpirun the hosts its ranks share memory on, else 1)")
      ->type_name("K");
  cmd->add_option("--top", flags->top, "Layouts to print (default 6)")->type_name("N");
  cmd->add_flag("--json", flags->json, "Print the plan as JSON");
  cmd->callback([parser, flags] {
    const TrainOptions options = parser->resolve(false);
    require_cpu_device(options.device, "plan",  // plan profiles the device it plans for
                       "profiles segments on the CPU only; GPU segment profiles are not built yet");
    run_plan_command(options, flags->processes, flags->nodes, flags->top, flags->json);
  });
}

}  // namespace vitpipe::cli
