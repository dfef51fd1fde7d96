// `vitpipe export CHECKPOINT --out DIR`: a training checkpoint (or a training output directory, meaning its best
// model, OUTPUT/model) -> a Hugging Face model directory that transformers loads as is. A checkpoint that holds only
// what trained (--freeze, --freeze-layers, --lora) is completed from its base model; LoRA is merged into the
// weights, and --adapter DIR also writes peft's adapter files. `--format onnx --out model.onnx` writes one ONNX file
// instead (io/onnx_export.h), from a checkpoint, a model directory, a Hub repo id or a peft adapter directory.
#include <filesystem>
#include <optional>

#include "cli/commands.h"
#include "io/model_files.h"
#include "io/onnx_export.h"
#include "io/peft_adapter.h"
#include "io/recorded_model_path.h"
#include "model/initializer.h"
#include "report/model_card.h"
#include "train/lora_export.h"
#include "train/subset_checkpoint.h"
#include "train/train_options.h"
#include "train/training_checkpoint.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"
#include "util/output_folder.h"

namespace vitpipe::cli {
namespace {

struct ExportOptions {
  std::string checkpoint;
  std::string out;
  std::string adapter;
  std::string format = "hf";
  int64_t image_size = 0;
  bool external_data = false;
  std::string license;
  bool force = false;
  OutputFolder out_folder, adapter_folder;  // checked by the overwrite rule before any work (hf only)
};

// The run a source came from: RUN/checkpoints/step-N/, RUN/model/ or RUN/adapter/ (a directory with metrics.jsonl).
std::filesystem::path run_of(const std::filesystem::path& source) {
  namespace fs = std::filesystem;
  const fs::path absolute = fs::absolute(source).lexically_normal();
  for (const fs::path& candidate : {absolute.parent_path(), absolute.parent_path().parent_path()}) {
    if (!candidate.empty() && fs::exists(candidate / "metrics.jsonl")) return candidate;
  }
  return {};
}

// A checkpoint's training step (trainer_state.json), so the card shows the run's results only for those weights.
std::optional<int64_t> checkpoint_step(const std::filesystem::path& source) {
  const auto state = source / "trainer_state.json";
  if (!std::filesystem::exists(state)) return std::nullopt;
  try {
    const auto j = nlohmann::json::parse(read_text_file(state));
    if (j.contains("step") && j["step"].is_number_integer()) return j["step"].get<int64_t>();
  } catch (const nlohmann::json::exception&) {
  }
  return std::nullopt;
}

// Refused before anything is exported: a README.md someone wrote by hand in a target directory.
void check_card_target(const std::filesystem::path& directory, bool force) {
  const auto readme = directory / "README.md";
  if (force || !std::filesystem::exists(readme)) return;
  VP_REQUIRE(is_vitpipe_model_card(read_text_file(readme)), "export: ", readme.string(),
             ": a README.md vitpipe did not write is there; not replaced (pass --force to replace it)");
}

// The model card of an hf export (and of its peft adapter), from the run the source came from when there is one.
void write_export_cards(const ExportOptions& o, const std::filesystem::path& source, const std::string& base_model) {
  if (o.format != "hf") return;
  ModelCardOptions card;
  card.run_dir = run_of(source);
  // A checkpoint is described by the run's results only if it is the evaluated model; RUN/model/ always is.
  if (!card.run_dir.empty() && std::filesystem::exists(source / "trainer_state.json")) {
    card.step = checkpoint_step(source);
    if (!card.step) card.step = -1;  // unknown step: results withheld
  }
  card.license = o.license;
  card.base_model = base_model;
  card.force = o.force;
  info("model card: ", write_model_card(o.out, card).string());
  // The card is part of the export: listed in the folder's marker, so the next export replaces it too.
  if (!o.out_folder.forced) mark_output_folder(o.out_folder, output_folder_files(o.out));
  if (!o.adapter.empty()) {
    card.adapter = true;
    info("model card: ", write_model_card(o.adapter, card).string());
    if (!o.adapter_folder.forced) mark_output_folder(o.adapter_folder, output_folder_files(o.adapter));
  }
}

// Replaces a previous export in the folder (shards of another size would otherwise stay beside the new files).
template <class Write>
void write_output_folder(const OutputFolder& folder, Write write) {
  remove_previous_output(folder);
  create_output_folder(folder);
  write();
  mark_output_folder(folder, output_folder_files(folder.dir));
}

// hf: the Hugging Face directory; onnx: one .onnx file (with --external-data, its weights beside it).
void write_export(const ExportOptions& o, const LoadedModel& model, const std::string& source) {
  if (o.format == "onnx") {
    export_onnx(model, o.out, {source, o.external_data});
  } else {
    write_output_folder(o.out_folder, [&] {
      save_model(o.out, model.config, model.preprocessor, model.parameters);  // each file atomically
    });
  }
}

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
  require_recorded_base(checkpoint.base_model, (source / "trainable.safetensors").string(),
                        "put it back there to export this checkpoint");
  LoadedModel base = load_model(checkpoint.base_model, load);
  auto layout = std::make_shared<const ParameterLayout>(base.config, mode.lora);
  FlatParameters values = FlatParameters::whole_model(layout);
  copy_parameters(base.parameters, values, /*only_present=*/true);
  const auto split = make_trainable_split(layout, mode);
  restore_trainable(checkpoint, *split, values, source.string());
  base.preprocessor = checkpoint.preprocessor;
  base.parameters = layout->lora().enabled() ? merge_lora(values) : values;
  write_export(o, base, source.string());
  if (!o.adapter.empty()) {
    VP_REQUIRE(layout->lora().enabled(), "export --adapter: ", source.string(), " was not trained with --lora");
    write_output_folder(o.adapter_folder, [&] { write_peft_adapter(o.adapter, values, checkpoint.base_model); });
    info("wrote peft's adapter files to ", o.adapter);
  }
  write_export_cards(o, source, checkpoint.base_model);
  info("exported ", source.string(), " (", mode.describe(), ", base ", checkpoint.base_model, ") to ", o.out);
}

// A training output directory means its best model: model/, what `train` exported (the best validation ROC-AUC's,
// or the last with --export-last), not its newest checkpoint. --adapter needs that model's checkpoint (what trained,
// unmerged). Any other checkpoint is exported by naming it.
std::filesystem::path best_model_of_run(const std::filesystem::path& run, const ExportOptions& o) {
  namespace fs = std::filesystem;
  std::error_code error;
  VP_REQUIRE(fs::is_directory(run / "checkpoints", error) || fs::is_directory(run / "model", error),
             "export: ", run.string(),
             " is neither a checkpoint (no config.json) nor a training output directory (no checkpoints/ or model/)");
  if (o.adapter.empty()) {
    const auto latest = latest_checkpoint(run);
    VP_REQUIRE(fs::exists(run / "model" / "config.json", error), "export: ", run.string(),
               " has no exported model yet (model/); name a checkpoint to export it",
               latest ? concat(", e.g. ", latest->string()) : std::string());
    return run / "model";
  }
  const auto best = best_model_checkpoint(run);
  VP_REQUIRE(best.has_value(), "export --adapter: ", run.string(),
             " no longer holds the checkpoint of its best model (see --keep-checkpoints); name a checkpoint under ",
             (run / "checkpoints").string());
  return *best;
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  auto* cmd = app.add_subcommand("export", "Turn a training checkpoint into a Hugging Face model directory");
  cmd->add_option("checkpoint", o->checkpoint,
                  "A checkpoint directory, or a training --output-dir (its best model, OUTPUT/model)")
      ->required();
  cmd->add_option("--out", o->out, "Directory to write config.json, model.safetensors, preprocessor_config.json")
      ->required();
  cmd->add_option("--adapter", o->adapter,
                  "A LoRA run: also write peft's adapter_config.json + adapter_model.safetensors to this directory");
  cmd->add_option("--format", o->format,
                  "hf (a Hugging Face directory) or onnx (one file: pixel_values -> logits, opset 17)")
      ->capture_default_str();
  cmd->add_option("--image-size", o->image_size,
                  "onnx: the input side the file takes (positions resampled once, at export); default the model's");
  cmd->add_flag("--force", o->force,
                "Write into --out (or --adapter) even though it holds other files (a README.md vitpipe did not write "
                "included); without it, a folder must be new, empty or a previous export (replaced)");
  cmd->add_flag("--external-data", o->external_data,
                "onnx: weights in OUT.data beside the file (always past protobuf's 2 GiB limit)");
  cmd->add_option("--license", o->license, "hf: the license the model card declares (a Hub license id)");
  cmd->callback([o] {
    namespace fs = std::filesystem;
    VP_REQUIRE(o->format == "hf" || o->format == "onnx", "export --format: expected hf or onnx, got \"", o->format,
               "\"");
    VP_REQUIRE(o->format == "onnx" || (o->image_size == 0 && !o->external_data),
               "export: --image-size and --external-data belong to --format onnx");
    VP_REQUIRE(o->format == "hf" || o->adapter.empty(), "export --adapter: peft's files go with --format hf");
    VP_REQUIRE(o->image_size >= 0, "export --image-size: expected a positive size, got ", o->image_size);
    if (o->format == "onnx") {  // before any work: the file's folder must exist, and the name not be a folder
      const fs::path parent = fs::absolute(o->out).parent_path();
      VP_REQUIRE(!fs::is_directory(o->out), "export --out ", o->out,
                 ": is a folder; --format onnx writes one file (e.g. ", (fs::path(o->out) / "model.onnx").string(),
                 ")");
      VP_REQUIRE(fs::is_directory(parent), "export --out ", o->out, ": its folder ", parent.string(),
                 " does not exist (create it first)");
    }
    if (o->format == "hf") o->out_folder = check_output_folder(o->out, "export", "--out", o->force);
    if (!o->adapter.empty()) o->adapter_folder = check_output_folder(o->adapter, "export", "--adapter", o->force);
    fs::path source = o->checkpoint;
    if (o->format == "hf") {
      check_card_target(o->out, o->force);
      if (!o->adapter.empty()) check_card_target(o->adapter, o->force);
    }
    if (o->format == "onnx" && !fs::is_directory(source)) {  // a Hub repo id
      LoadOptions load;
      load.image_size = o->image_size;
      write_export(*o, load_model(o->checkpoint, load), o->checkpoint);
      return;
    }
    VP_REQUIRE(fs::is_directory(source), "export: ", source.string(), " is not a directory");
    const bool adapter = is_peft_adapter_directory(source);  // merged into its base here
    if (!fs::exists(source / "config.json") && !adapter) source = best_model_of_run(source, *o);
    if (fs::exists(source / "trainable.safetensors")) {
      VP_REQUIRE(o->image_size == 0, "export --image-size: ", source.string(),
                 " holds only what trained; export it to a model directory first, then that at another size");
      export_subset_checkpoint(source, *o);
      return;
    }
    VP_REQUIRE(o->adapter.empty(), "export --adapter: ", source.string(), " was not trained with --lora");
    LoadOptions load;
    load.reference.allow_download = adapter;  // an adapter's base may be a Hub id not yet cached
    load.image_size = o->image_size;
    LoadedModel model = load_model(source.string(), load);
    VP_REQUIRE(model.config.num_labels() > 0, "export: ", source.string(), " has no classifier labels");
    write_export(*o, model, source.string());
    write_export_cards(*o, source, "");
    info("exported ", source.string(), " to ", o->out);
  });
}

}  // namespace vitpipe::cli
