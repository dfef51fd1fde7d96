// `vitpipe predict --model DIR_OR_REPO IMAGE...`: the model's image processor (ViT, DeiT or Bit: Pillow's resize,
// centre crop, bit-exact), the model, and per-label probabilities (sigmoid for multi-label, softmax for
// single-label), one line per image, written as it is made. Folders and @LIST files stream (data/image_inputs.h);
// an unreadable image is reported at the end, after the rows of the others, and makes the exit status 1 unless
// --skip-unreadable.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/data_flags.h"
#include "cli/device_flag.h"
#include "data/csv_table.h"
#include "data/image.h"
#include "data/image_inputs.h"
#include "data/image_processor.h"
#include "explain/explain_images.h"
#include "inference/image_classifier.h"
#include "io/model_files.h"
#include "model/vit_stage.h"
#include "util/error.h"
#include "util/log.h"
#include "util/threads.h"

namespace vitpipe::cli {
namespace {

struct PredictOptions {
  std::string model;
  std::string revision = "main";
  std::vector<std::string> images;
  ImageReadFlags read;
  int64_t image_size = 0;
  int threads = 0;
  std::string device = "cpu";  // --device cpu|cuda|auto
  bool allow_tf32 = false;
  std::string format = "json";
  int64_t batch_size = 16;
  std::string labels;       // NAME,NAME,...: an adapter's classifier labels that nothing else names
  std::string heatmap_dir;  // also explain each image's most probable finding (gradient-weighted rollout)
  bool skip_unreadable = false;
};

// One input that could not be read, kept until the end so the rows of the others are not held back.
struct Unreadable {
  std::string path, reason;
};

std::string join_arguments(const std::vector<std::string>& arguments) {
  std::string out;
  for (const auto& a : arguments) out += (out.empty() ? "" : ", ") + a;
  return out;
}

void print_row(const PredictOptions& o, const std::string& path, const ImagePrediction& p,
               const std::vector<std::string>& labels) {
  if (o.format == "json") {
    std::printf("%s\n", prediction_json(path, p, labels).dump().c_str());
  } else {
    std::printf("%s", csv_escape(path).c_str());
    for (double v : p.probabilities) std::printf(",%.6g", v);
    std::printf("\n");
  }
}

void run_predict(const PredictOptions& o) {
  VP_REQUIRE(o.format == "json" || o.format == "csv", "--format: expected json or csv, got \"", o.format, "\"");
  VP_REQUIRE(o.batch_size >= 1 && o.batch_size <= 1024, "--batch-size: expected 1..1024, got ", o.batch_size);
  configure_threads(o.threads);
  OutputFolder heatmaps;  // checked before any work: the overwrite rule of explain --out
  if (!o.heatmap_dir.empty()) heatmaps = check_output_folder(o.heatmap_dir, "explain", "--heatmap", false);
  ImageInputs inputs(o.images);
  const int64_t batch = inputs.only_files()
                            ? std::min<int64_t>(o.batch_size, static_cast<int64_t>(inputs.argument_count()))
                            : o.batch_size;
  ImageClassifier classifier = load_image_classifier(o.model, o.revision, o.image_size, o.labels, o.read, batch,
                                                     resolve_device(o.device), o.allow_tf32);
  const ImageReadOptions& reading = classifier.reading();
  const LoadedModel& model = classifier.model();
  const std::vector<std::string>& labels = classifier.labels();
  if (o.format == "csv") {
    std::printf("image");
    for (const auto& label : labels) std::printf(",%s", csv_escape(label).c_str());
    std::printf("\n");
  }
  std::vector<float> pixels(static_cast<size_t>(batch * classifier.input_floats()));
  std::vector<std::string> paths;     // the current batch's readable images
  std::vector<std::string> readable;  // all of them, only for --heatmap
  std::vector<Unreadable> unreadable;
  int64_t rows = 0;
  const auto flush = [&] {
    if (paths.empty()) return;
    const int64_t b = static_cast<int64_t>(paths.size());
    const std::vector<ImagePrediction> predictions = classifier.classify(pixels.data(), b);
    for (int64_t i = 0; i < b; ++i)
      print_row(o, paths[static_cast<size_t>(i)], predictions[static_cast<size_t>(i)], labels);
    std::fflush(stdout);  // rows go out as they are made: a long run shows progress and loses nothing
    rows += b;
    if (!o.heatmap_dir.empty()) readable.insert(readable.end(), paths.begin(), paths.end());
    paths.clear();
  };
  while (const auto path = inputs.next()) {
    DecodedImage image;
    try {
      image = decode_image_file_keep_gray(*path, reading);
    } catch (const Error& e) {  // a file that cannot be read is reported at the end; the others still get rows
      unreadable.push_back({*path, e.what()});
      continue;
    }
    classifier.preprocess(image, *path, pixels.data() + static_cast<int64_t>(paths.size()) * classifier.input_floats());
    paths.push_back(*path);
    if (static_cast<int64_t>(paths.size()) == batch) flush();
  }
  flush();
  const int64_t total = rows + static_cast<int64_t>(unreadable.size());
  VP_REQUIRE(total > 0, "no images found in ", join_arguments(o.images),
             " (folders are searched for .png, .jpg, .jpeg, .dcm and DICOM files)");
  if (!unreadable.empty()) {
    for (const auto& u : unreadable) std::fprintf(stderr, "unreadable: %s\n", u.reason.c_str());
    const std::string summary =
        concat(unreadable.size(), " of ", total, " images unreadable (first: ", unreadable.front().path,
               "); rows were written for the other ", rows);
    VP_REQUIRE(o.skip_unreadable && rows > 0, summary,
               o.skip_unreadable ? "" : "; pass --skip-unreadable to exit 0 when only some images are unreadable");
    warn(summary, " (--skip-unreadable)");
  }
  if (!o.heatmap_dir.empty()) {
    ExplainRequest request;
    request.out_dir = o.heatmap_dir;
    request.out_folder = heatmaps;
    request.reading = reading;
    request.device = resolve_device(o.device);
    request.allow_tf32 = o.allow_tf32;
    const auto maps = explain_images(model, o.model, readable, request);
    std::fprintf(stderr, "heatmaps: %zu in %s (vitpipe explain for other methods and findings)\n", maps.size(),
                 o.heatmap_dir.c_str());
  }
}

}  // namespace

void add_predict_command(CLI::App& app) {
  auto o = std::make_shared<PredictOptions>();
  auto* cmd =
      app.add_subcommand("predict", "Run a model on PNG, JPEG or DICOM images: logits and per-label probabilities");
  cmd->add_option("--model", o->model, "Model directory or Hugging Face repo id")->required();
  cmd->add_option("--revision", o->revision, "Hub revision (branch, tag or commit) of a repo id");
  cmd->add_option("--image-size", o->image_size, "Run at another resolution (position embeddings resized bicubically)");
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--labels", o->labels,
                  "NAME,NAME,...: the labels of a peft adapter's classifier when no config.json names them");
  cmd->add_option("--format", o->format, "json (one object per line) or csv")->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "Images per forward pass")->capture_default_str();
  cmd->add_option("--heatmap", o->heatmap_dir,
                  "Also write each image's heatmap for its most probable label (gradient-weighted rollout) to DIR");
  add_image_read_flags(cmd, &o->read);
  cmd->add_flag("--skip-unreadable", o->skip_unreadable,
                "Exit 0 when some images cannot be read (each is still reported at the end); without it the rows of "
                "the readable ones are written and the exit status is 1");
  cmd->add_option("images", o->images,
                  "Image files (PNG, JPEG or DICOM), folders (searched recursively) and @LIST files (one path per "
                  "line)")
      ->required();
  add_device_flag(cmd, &o->device);
  add_allow_tf32_flag(cmd, &o->allow_tf32);
  cmd->callback([o] {
    resolve_device(o->device);  // a --device cuda that cannot run says so before the model loads
    run_predict(*o);
  });
}

}  // namespace vitpipe::cli
