// `vitpipe explain --model M --method rollout|grad-rollout|gradcam [--head-fusion mean|max|min] [--discard-ratio X]
// [--finding NAME | --top K] --out DIR IMAGE...`:
// where the model looks, per image and finding (explain/explain_images.h).
#include <cstdio>

#include "cli/commands.h"
#include "cli/data_flags.h"
#include "cli/device_flag.h"
#include "explain/explain_images.h"
#include "io/model_files.h"
#include "util/error.h"
#include "util/threads.h"

namespace vitpipe::cli {
namespace {

struct ExplainOptions {
  std::string model;
  std::string revision = "main";
  std::vector<std::string> methods{"grad-rollout"};
  std::string head_fusion = "mean";
  double discard_ratio = 0.9;
  std::vector<std::string> findings;
  int64_t top = 1;
  std::string out;
  std::vector<std::string> images;
  ImageReadFlags read;
  int threads = 0;
  std::string device = "cpu";  // --device cpu|cuda|auto
  bool allow_tf32 = false;
  bool force = false;
};

void run_explain(const ExplainOptions& o) {
  configure_threads(o.threads);
  ExplainRequest request;
  request.out_folder = check_output_folder(o.out, "explain", "--out", o.force);  // before the model loads
  request.methods.clear();
  for (const auto& m : o.methods) request.methods.push_back(parse_explain_method(m));
  request.rollout.head_fusion = parse_head_fusion(o.head_fusion);
  request.rollout.discard_ratio = o.discard_ratio;
  check_rollout_options(request.rollout);
  LoadOptions load;
  load.reference.revision = o.revision;
  const LoadedModel model = load_model(o.model, load);
  request.findings = o.findings;
  request.top = o.top;
  request.out_dir = o.out;
  request.reading = resolve_image_read(o.read, model.preprocessor, model.directory.string());
  request.device = resolve_device(o.device);
  request.allow_tf32 = o.allow_tf32;
  const std::vector<ExplainedMap> maps = explain_images(model, o.model, o.images, request);
  for (const ExplainedMap& m : maps) {
    std::printf("%s  %s  p=%.4f  %s  -> %s/%s\n", m.image.c_str(), m.finding.c_str(), m.probability, m.method.c_str(),
                o.out.c_str(), m.overlay.c_str());
  }
  std::printf(
      "%zu maps in %s (overlays .png at each image's resolution, raw maps .npy at the %lldx%lld patch grid, "
      "index.json)\n",
      maps.size(), o.out.c_str(), maps.empty() ? 0LL : static_cast<long long>(maps.front().grid_height),
      maps.empty() ? 0LL : static_cast<long long>(maps.front().grid_width));
}

}  // namespace

void add_explain_command(CLI::App& app) {
  auto o = std::make_shared<ExplainOptions>();
  auto* cmd = app.add_subcommand("explain",
                                 "Heatmaps of where the model looks: attention rollout, gradient-weighted "
                                 "rollout or Grad-CAM, per image and finding");
  cmd->add_option("--model", o->model, "Model directory or Hugging Face repo id")->required();
  cmd->add_option("--revision", o->revision, "Hub revision (branch, tag or commit) of a repo id");
  cmd->add_option("--method", o->methods, "rollout | grad-rollout | gradcam (repeatable)")
      ->capture_default_str()
      ->allow_extra_args(false);
  cmd->add_option("--head-fusion", o->head_fusion, "rollout: fuse a block's heads by their mean, max or min")
      ->capture_default_str();
  cmd->add_option("--discard-ratio", o->discard_ratio,
                  "rollout: drop this fraction of each row's weakest attentions first, in [0, 1)")
      ->capture_default_str();
  auto* finding = cmd->add_option("--finding", o->findings, "A label to explain (repeatable)")->allow_extra_args(false);
  cmd->add_option("--top", o->top, "Explain each image's K most probable labels")
      ->capture_default_str()
      ->excludes(finding);
  cmd->add_option("--out", o->out, "Output directory: new, empty or a previous explain output (replaced), else --force")
      ->required();
  cmd->add_flag("--force", o->force, "Write into --out even though it holds other files");
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all cores)");
  add_image_read_flags(cmd, &o->read);
  cmd->add_option("images", o->images, "Image files (PNG, JPEG or DICOM)")->required();
  add_device_flag(cmd, &o->device);
  add_allow_tf32_flag(cmd, &o->allow_tf32);
  cmd->callback([o] {
    resolve_device(o->device);  // a --device cuda that cannot run says so before the model loads
    run_explain(*o);
  });
}

}  // namespace vitpipe::cli
