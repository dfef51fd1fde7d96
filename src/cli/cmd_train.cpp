// `vitpipe train`: fine-tune (see train/trainer.h). Every flag can also come from --config FILE (JSON or YAML).
#include "cli/commands.h"
#include "cli/device_flag.h"
#include "train/train_options.h"
#include "train/trainer.h"

namespace vitpipe::cli {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train",
      "Fine-tune a model on a dataset: evaluate on the validation split, checkpoint, export the best model in Hugging "
      "Face format. Under mpirun: pipeline stages x data-parallel replicas");
  auto parser = add_train_options(cmd);
  cmd->callback([parser] {
    const TrainOptions options = parser->resolve();
    resolve_device(options.device);  // a --device cuda that cannot run says so before any work
    run_training(options);
  });
}

}  // namespace vitpipe::cli
