// `vitpipe export CHECKPOINT --out DIR`: a training checkpoint (or a training output directory, meaning its latest
// checkpoint) -> a Hugging Face model directory that transformers loads as is.
#include <filesystem>

#include "cli/commands.h"
#include "io/model_files.h"
#include "train/training_checkpoint.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe::cli {

void add_export_command(CLI::App& app) {
  struct Options {
    std::string checkpoint;
    std::string out;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("export", "Turn a training checkpoint into a Hugging Face model directory");
  cmd->add_option("checkpoint", o->checkpoint, "A checkpoint directory, or a training --output-dir (its latest)")
      ->required();
  cmd->add_option("--out", o->out, "Directory to write config.json, model.safetensors, preprocessor_config.json")
      ->required();
  cmd->callback([o] {
    namespace fs = std::filesystem;
    fs::path source = o->checkpoint;
    VP_REQUIRE(fs::is_directory(source), "export: ", source.string(), " is not a directory");
    if (!fs::exists(source / "config.json")) {
      auto latest = latest_checkpoint(source);
      VP_REQUIRE(latest.has_value(), "export: ", source.string(),
                 " is neither a checkpoint (no config.json) nor a training output directory (no checkpoints/latest)");
      source = *latest;
    }
    LoadOptions load;
    load.reference.allow_download = false;
    LoadedModel model = load_model(source.string(), load);
    VP_REQUIRE(model.config.num_labels() > 0, "export: ", source.string(), " has no classifier labels");
    save_model(o->out, model.config, model.preprocessor, model.parameters);  // each file atomically
    info("exported ", source.string(), " to ", o->out);
  });
}

}  // namespace vitpipe::cli
