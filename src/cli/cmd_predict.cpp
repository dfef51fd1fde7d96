// `vitpipe predict --model DIR_OR_REPO IMAGE...`: the model's image processor (ViT, DeiT or Bit: Pillow's resize,
// centre crop, bit-exact), the model, and per-label probabilities (sigmoid for multi-label, softmax for
// single-label), one line per image.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/data_flags.h"
#include "cli/device_flag.h"
#include "data/csv_table.h"
#include "data/image.h"
#include "data/image_processor.h"
#include "explain/explain_images.h"
#include "inference/image_classifier.h"
#include "io/model_files.h"
#include "model/vit_stage.h"
#include "util/error.h"
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
};

void run_predict(const PredictOptions& o) {
  VP_REQUIRE(o.format == "json" || o.format == "csv", "--format: expected json or csv, got \"", o.format, "\"");
  VP_REQUIRE(o.batch_size >= 1 && o.batch_size <= 1024, "--batch-size: expected 1..1024, got ", o.batch_size);
  configure_threads(o.threads);
  const int64_t batch = std::min<int64_t>(o.batch_size, static_cast<int64_t>(o.images.size()));
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
  std::vector<float> inputs(static_cast<size_t>(batch * classifier.input_floats()));
  for (size_t start = 0; start < o.images.size(); start += static_cast<size_t>(batch)) {
    const int64_t b = std::min<int64_t>(batch, static_cast<int64_t>(o.images.size() - start));
    for (int64_t i = 0; i < b; ++i) {
      const std::string& path = o.images[start + static_cast<size_t>(i)];
      classifier.preprocess(decode_image_file_keep_gray(path, reading), path,
                            inputs.data() + i * classifier.input_floats());
    }
    const std::vector<ImagePrediction> predictions = classifier.classify(inputs.data(), b);
    for (int64_t i = 0; i < b; ++i) {
      const std::string& path = o.images[start + static_cast<size_t>(i)];
      const ImagePrediction& p = predictions[static_cast<size_t>(i)];
      if (o.format == "json") {
        std::printf("%s\n", prediction_json(path, p, labels).dump().c_str());
      } else {
        std::printf("%s", csv_escape(path).c_str());
        for (double v : p.probabilities) std::printf(",%.6g", v);
        std::printf("\n");
      }
    }
  }
  if (!o.heatmap_dir.empty()) {
    ExplainRequest request;
    request.out_dir = o.heatmap_dir;
    request.reading = reading;
    request.device = resolve_device(o.device);
    request.allow_tf32 = o.allow_tf32;
    const auto maps = explain_images(model, o.model, o.images, request);
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
  cmd->add_option("images", o->images, "Image files (PNG, JPEG or DICOM)")->required();
  add_device_flag(cmd, &o->device);
  add_allow_tf32_flag(cmd, &o->allow_tf32);
  cmd->callback([o] {
    resolve_device(o->device);  // a --device cuda that cannot run says so before the model loads
    run_predict(*o);
  });
}

}  // namespace vitpipe::cli
