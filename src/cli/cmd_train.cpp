// `vitpipe train`: fine-tune (see train/trainer.h). Every flag can also come from --config FILE (JSON or YAML).
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"
#include "cli/device_flag.h"
#include "io/hub_push.h"
#include "train/train_options.h"
#include "train/trainer.h"
#include "util/log.h"

namespace vitpipe::cli {
namespace {

// The process that exported the model: without mpirun the only one, under mpirun world rank 0.
bool is_exporting_process() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* rank = std::getenv(name)) return std::atoi(rank) == 0;
  }
  return true;
}

}  // namespace

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
    HubPushOptions push;
    push.repo_id = options.push_to_hub;
    // A missing token or a malformed repo id is said before the run, not after hours of training.
    if (!push.repo_id.empty()) check_push_request(push, HubSettings::from_environment());
    // Stopped by a signal, with a checkpoint: exit 128 + the signal (CLI11 returns a RuntimeError's code silently).
    if (const int status = run_training(options); status != 0) throw CLI::RuntimeError(status);
    if (!push.repo_id.empty() && is_exporting_process()) {
      const std::filesystem::path model = std::filesystem::path(options.output_dir) / "model";
      HubPushResult result = push_folder(model, push, HubSettings::from_environment());
      info("pushed ", model.string(), " to ", push.repo_id, ": ", result.commit_url);
    }
  });
}

}  // namespace vitpipe::cli
