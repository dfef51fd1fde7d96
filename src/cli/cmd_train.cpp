// `vitpipe train`: fine-tune (see train/trainer.h). Every flag can also come from --config FILE (JSON or YAML).
#include "cli/commands.h"
#include "train/train_options.h"
#include "train/trainer.h"

namespace vitpipe::cli {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train",
      "Fine-tune a model on a dataset: evaluate on the validation split, checkpoint, export the best model in Hugging "
      "Face format. Under mpirun: pipeline stages x data-parallel replicas");
  auto parser = add_train_options(cmd);
  cmd->callback([parser] { run_training(parser->resolve()); });
}

}  // namespace vitpipe::cli
