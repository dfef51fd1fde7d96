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
      "Face format. Under mpirun: pipeline stages x data-parallel replicas. SIGINT, SIGTERM and SIGUSR1 stop it at the "
      "next step with a checkpoint and exit 128 + the signal (130, 143, 138; a second Ctrl-C stops at once, exit "
      "130); the same command with --resume auto continues it");
  auto parser = add_train_options(cmd);
  cmd->callback([parser] {
    const TrainOptions options = parser->resolve();
    resolve_device(options.device);  // a --device cuda that cannot run says so before any work
    // Stopped by a signal, with a checkpoint: exit 128 + the signal (CLI11 returns a RuntimeError's code silently).
    if (const int status = run_training(options); status != 0) throw CLI::RuntimeError(status);
  });
}

}  // namespace vitpipe::cli
