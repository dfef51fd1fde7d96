// `vitpipe export CHECKPOINT --out DIR`: a training checkpoint (or a training output directory, meaning its latest
// checkpoint) -> a Hugging Face model directory that transformers loads as is. A checkpoint that holds only what
// trained (--freeze, --freeze-layers, --lora) is completed from its base model; LoRA is merged into the weights, and
// --adapter DIR also writes peft's adapter files.
#include <filesystem>

#include "cli/commands.h"
#include "io/model_files.h"
#include "io/peft_adapter.h"
#include "model/initializer.h"
#include "train/lora_export.h"
#include "train/subset_checkpoint.h"
#include "train/train_options.h"
#include "train/training_checkpoint.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe::cli {
namespace {

struct ExportOptions {
  std::string checkpoint;
  std::string out;
  std::string adapter;
};

void export_subset_checkpoint(const std::filesystem::path& source, const ExportOptions& o) {
  const TrainingCheckpoint checkpoint = read_training_checkpoint(source);
  TrainOptions options;
  apply_config_json(options, checkpoint.state.options, (source / "trainer_state.json").string());
  const TrainingMode mode = options.training_mode();
  LoadOptions load;
  load.labels = checkpoint.config.labels;
  load.problem_type = checkpoint.config.problem_type;
  load.image_size = options.image_size;
  load.allow_fresh_head = true;  // the classifier comes from the checkpoint
  LoadedModel base = load_model(checkpoint.base_model, load);
  auto layout = std::make_shared<const ParameterLayout>(base.config, mode.lora);
  FlatParameters values = FlatParameters::whole_model(layout);
  copy_parameters(base.parameters, values, /*only_present=*/true);
  const auto split = make_trainable_split(layout, mode);
  restore_trainable(checkpoint, *split, values, source.string());
  save_model(o.out, base.config, checkpoint.preprocessor, layout->lora().enabled() ? merge_lora(values) : values);
  if (!o.adapter.empty()) {
    VP_REQUIRE(layout->lora().enabled(), "export --adapter: ", source.string(), " was not trained with --lora");
    write_peft_adapter(o.adapter, values, checkpoint.base_model);
    info("wrote peft's adapter files to ", o.adapter);
  }
  info("exported ", source.string(), " (", mode.describe(), ", base ", checkpoint.base_model, ") to ", o.out);
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  auto* cmd = app.add_subcommand("export", "Turn a training checkpoint into a Hugging Face model directory");
  cmd->add_option("checkpoint", o->checkpoint, "A checkpoint directory, or a training --output-dir (its latest)")
      ->required();
  cmd->add_option("--out", o->out, "Directory to write config.json, model.safetensors, preprocessor_config.json")
      ->required();
  cmd->add_option("--adapter", o->adapter,
                  "A LoRA run: also write peft's adapter_config.json + adapter_model.safetensors to this directory");
  cmd->callback([o] {
    namespace fs = std::filesystem;
    fs::path source = o->checkpoint;
    VP_REQUIRE(fs::is_directory(source), "export: ", source.string(), " is not a directory");
    const bool adapter = is_peft_adapter_directory(source);  // merged into its base here
    if (!fs::exists(source / "config.json") && !adapter) {
      auto latest = latest_checkpoint(source);
      VP_REQUIRE(latest.has_value(), "export: ", source.string(),
                 " is neither a checkpoint (no config.json) nor a training output directory (no checkpoints/latest)");
      source = *latest;
    }
    if (fs::exists(source / "trainable.safetensors")) {
      export_subset_checkpoint(source, *o);
      return;
    }
    VP_REQUIRE(o->adapter.empty(), "export --adapter: ", source.string(), " was not trained with --lora");
    LoadOptions load;
    load.reference.allow_download = adapter;  // an adapter's base may be a Hub id not yet cached
    LoadedModel model = load_model(source.string(), load);
    VP_REQUIRE(model.config.num_labels() > 0, "export: ", source.string(), " has no classifier labels");
    save_model(o->out, model.config, model.preprocessor, model.parameters);  // each file atomically
    info("exported ", source.string(), " to ", o->out);
  });
}

}  // namespace vitpipe::cli
