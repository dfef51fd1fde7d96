// `vitpipe init`: a randomly initialised ViT or DINOv2 in Hugging Face format (config.json, model.safetensors,
// preprocessor_config.json) with transformers' initialisation; a starting point when no pre-trained model fits, and
// the shapes of released checkpoints (dinov2-small, dinov2-base, rad-dino) for tests and benchmarks.
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "data/chestxray14_findings.h"
#include "io/model_files.h"
#include "io/preprocessor_config.h"
#include "io/preprocessor_presets.h"
#include "model/initializer.h"
#include "model/presets.h"
#include "util/error.h"
#include "util/log.h"
#include "util/output_folder.h"
#include "util/progress.h"

namespace vitpipe::cli {
namespace {

struct InitArguments {
  std::string preset;
  int64_t image_size = 0;
  int64_t patch_size = 0;
  std::string labels = "chestxray14";
  std::string problem_type = "multi_label";
  uint64_t seed = 0;
  std::string out;
  bool force = false;
};

std::vector<std::string> parse_labels(const std::string& text) {
  if (text == "chestxray14") return chestxray14_findings();
  std::vector<std::string> labels;
  std::set<std::string> seen;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string label = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    VP_REQUIRE(!label.empty(), "--labels: empty label name in \"", text, "\" (expected chestxray14 or NAME,NAME,...)");
    VP_REQUIRE(seen.insert(label).second, "--labels: \"", label, "\" appears twice");
    labels.push_back(label);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return labels;
}

void run_init(const InitArguments& args) {
  ViTConfig config = preset_config(args.preset);
  PreprocessorConfig preprocessor = preset_preprocessor(args.preset);
  if (args.patch_size != 0) config.patch_size = args.patch_size;
  if (args.image_size != 0 && config.dinov2_family()) {
    // DINOv2 keeps its position grid (config.json's image_size) and is fed what its processor crops.
    preprocessor = preprocessor_for_image_size(preprocessor, args.image_size);
    config.input_image_size = args.image_size;
  } else if (args.image_size != 0) {
    config.image_size = args.image_size;
    preprocessor = default_preprocessor_config(config.image_size);
  }
  VP_REQUIRE(config.image_size > 0 && config.patch_size > 0, "--image-size and --patch-size must be positive");
  VP_REQUIRE(config.image_size % config.patch_size == 0, "--patch-size ", config.patch_size,
             " does not divide the image size ", config.image_size);
  config.labels = parse_labels(args.labels);
  VP_REQUIRE(args.problem_type == "multi_label" || args.problem_type == "single_label",
             "--problem-type: expected multi_label or single_label, got \"", args.problem_type, "\"");
  config.problem_type = args.problem_type == "multi_label" ? ProblemType::multi_label : ProblemType::single_label;
  config.validate("--preset " + args.preset);

  const std::filesystem::path out(args.out);
  const OutputFolder folder = check_output_folder(out, "init", "--out", args.force);

  auto layout = std::make_shared<const ParameterLayout>(config);
  FlatParameters parameters = FlatParameters::whole_model(layout);
  initialize_parameters(parameters, args.seed);
  remove_previous_output(folder);
  create_output_folder(folder);
  save_model(out, config, preprocessor, parameters);
  mark_output_folder(folder, output_folder_files(out));
  info("wrote ", args.preset, " (", layout->numel(), " parameters, image ", config.image_size, ", patch ",
       config.patch_size, ", ", config.num_labels(), " labels, ", problem_type_name(config.problem_type), ", seed ",
       args.seed, ") to ", out.string());
}

}  // namespace

void add_init_command(CLI::App& app) {
  auto args = std::make_shared<InitArguments>();
  auto* cmd = app.add_subcommand("init", "Write a randomly initialised ViT or DINOv2 in Hugging Face format");
  std::string presets;
  for (const auto& name : preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  cmd->add_option("--preset", args->preset, "Model shape: " + presets)->required();
  cmd->add_option("--image-size", args->image_size,
                  "Input image side in pixels (default: the preset's; DINOv2 keeps its 37 x 37 position grid and "
                  "crops its input to this size)");
  cmd->add_option("--patch-size", args->patch_size, "Patch side in pixels (default: the preset's)");
  cmd->add_option("--labels", args->labels, "chestxray14 (the 14 findings) or NAME,NAME,...")->capture_default_str();
  cmd->add_option("--problem-type", args->problem_type, "multi_label (sigmoid + BCE) or single_label (softmax + CE)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed of the initialisation")->capture_default_str();
  cmd->add_option("--out", args->out, "Directory to write")->required();
  cmd->add_flag("--force", args->force,
                "Write into --out even though it holds other files (a previous init output is replaced without it)");
  cmd->callback([args] { run_init(*args); });
}

}  // namespace vitpipe::cli
