// `vitpipe card MODEL_DIR`: (re)writes MODEL_DIR/README.md, the model card (report/model_card.h), from the run's own
// files. The run is --run, else the one the existing card names, else MODEL_DIR's parent when it is a training
// output directory (train writes RUN/model/).
#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli/commands.h"
#include "io/hub_settings.h"
#include "io/peft_adapter.h"
#include "report/model_card.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe::cli {
namespace {

struct CardOptions {
  std::string model_dir;
  std::string run;
  std::string license;
  std::string base_model;
  bool force = false;
  bool print = false;
};

void run_card(const CardOptions& o) {
  namespace fs = std::filesystem;
  const fs::path dir = o.model_dir;
  VP_REQUIRE(fs::is_directory(dir), "card: ", o.model_dir, " is not a directory");
  ModelCardOptions options;
  const fs::path readme = dir / "README.md";
  if (fs::exists(readme)) {
    if (auto previous = model_card_source(read_text_file(readme))) options = *previous;
  }
  if (!options.run_dir.empty() && !fs::exists(options.run_dir / "metrics.jsonl")) {
    warn("card: the run the existing card names, ", options.run_dir.string(), ", is gone (moved?)");
    options.run_dir.clear();  // a moved run/model/ finds its run beside it below
  }
  const fs::path parent = fs::absolute(dir).lexically_normal().parent_path();
  if (options.run_dir.empty() && fs::exists(parent / "metrics.jsonl")) options.run_dir = parent;
  if (options.run_dir.empty()) options.step.reset();
  if (!o.run.empty()) {
    VP_REQUIRE(fs::exists(fs::path(o.run) / "metrics.jsonl"), "card --run: ", o.run,
               " is not a training run (no metrics.jsonl)");
    options.run_dir = o.run;
    options.step.reset();  // a run named by hand describes its own model/
  }
  if (!o.license.empty()) options.license = o.license;
  if (!o.base_model.empty()) {
    VP_REQUIRE(is_valid_repo_id(o.base_model) && o.base_model.find('/') != std::string::npos,
               "card --base-model: expected a Hub repo id (org/name), got \"", o.base_model, "\"");
    options.base_model = o.base_model;
  }
  options.adapter = is_peft_adapter_directory(dir);
  options.force = o.force;
  if (o.print) {
    std::fputs(model_card_markdown(dir, options).c_str(), stdout);
    return;
  }
  const fs::path written = write_model_card(dir, options);
  info("model card: ", written.string(),
       options.run_dir.empty() ? " (no training run known: data and results not evaluated)"
                               : " (from the run " + options.run_dir.string() + ")");
}

}  // namespace

void add_card_command(CLI::App& app) {
  auto o = std::make_shared<CardOptions>();
  auto* cmd = app.add_subcommand(
      "card", "Write the model card (README.md: Hub metadata, intended use, data, results) from the run's files");
  cmd->add_option("model_dir", o->model_dir, "A model (or peft adapter) directory")->required();
  cmd->add_option("--run", o->run,
                  "The training output directory it came from (default: the one already recorded, "
                  "or the parent of a run's model/)");
  cmd->add_option("--license", o->license, "The license to declare (a Hub license id, e.g. apache-2.0)");
  cmd->add_option("--base-model", o->base_model, "The Hub repo id it was fine-tuned from");
  cmd->add_flag("--force", o->force, "Replace a README.md vitpipe did not write");
  cmd->add_flag("--stdout", o->print, "Print the card instead of writing it");
  cmd->callback([o] { run_card(*o); });
}

}  // namespace vitpipe::cli
