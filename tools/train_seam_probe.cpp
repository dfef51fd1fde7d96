// Proof 3 of issue 24 for the trainer: `train_seam_probe TRAIN-FLAGS...` runs `vitpipe train TRAIN-FLAGS...` in this
// process; `train_seam_probe predict|explain FLAGS...` runs that command (src/cli/cmd_predict.cpp, cmd_explain.cpp).
// With VITPIPE_PROBE_SEAM=1 every backend make_cpu_backend() makes (the trainer's stages, the explainer of the final
// heatmaps) is a SeamBackend (tools/seam_backend.h) that closes the training state (parameters, gradients, optimizer
// moments: every tensor handed to an optimizer, gradient-norm, zeroing or host-copy op) to the host between backend
// calls, so any host access to it from the trainer, the pipeline executor, evaluation, checkpointing or export is
// recorded with its call stack. The summary line and the touches go to stderr (tests/cuda/check_seam_train.py reads
// them); the run's files are the plain run's.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "seam_backend.h"
#include "train/train_options.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  using namespace vitpipe;
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    const bool seam = std::getenv("VITPIPE_PROBE_SEAM") != nullptr;
    if (seam) {
      set_backend_wrapper([](std::unique_ptr<Backend> inner) {
        return make_seam_backend(std::move(inner), SeamWatch::training_state);
      });
    }
    if (!args.empty() && (args[0] == "predict" || args[0] == "explain")) {
      CLI::App app{"train_seam_probe"};
      app.require_subcommand(1);
      cli::add_predict_command(app);
      cli::add_explain_command(app);
      try {
        app.parse(argc, argv);
      } catch (const CLI::ParseError& e) {
        return app.exit(e);
      }
    } else {
      run_training(parse_train_options(args));
    }
    if (seam) {
      const SeamReport r = seam_report();
      std::fprintf(stderr,
                   "seam: %lld page ranges closed between calls, %lld of %lld handed bytes; %lld host touches\n",
                   static_cast<long long>(r.regions), static_cast<long long>(r.watched_bytes),
                   static_cast<long long>(r.handed_bytes), static_cast<long long>(r.touches));
      seam_print_touches(stderr);
      seam_release();
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_seam_probe: %s\n", e.what());
    return 1;
  }
}
