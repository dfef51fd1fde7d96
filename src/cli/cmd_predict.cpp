// `vitpipe predict --model DIR_OR_REPO IMAGE...`: the model's image processor (ViT, DeiT or Bit: Pillow's resize,
// centre crop, bit-exact), the model, and per-label probabilities (sigmoid for multi-label, softmax for
// single-label), one line per image.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/data_flags.h"
#include "data/csv_table.h"
#include "data/image.h"
#include "data/image_processor.h"
#include "explain/explain_images.h"
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
  std::string format = "json";
  int64_t batch_size = 16;
  std::string labels;       // NAME,NAME,...: an adapter's classifier labels that nothing else names
  std::string heatmap_dir;  // also explain each image's most probable finding (gradient-weighted rollout)
};

void run_predict(const PredictOptions& o) {
  VP_REQUIRE(o.format == "json" || o.format == "csv", "--format: expected json or csv, got \"", o.format, "\"");
  VP_REQUIRE(o.batch_size >= 1 && o.batch_size <= 1024, "--batch-size: expected 1..1024, got ", o.batch_size);
  configure_threads(o.threads);
  LoadOptions load;
  load.image_size = o.image_size;
  load.reference.revision = o.revision;
  for (size_t start = 0; !o.labels.empty() && start <= o.labels.size();) {
    const size_t comma = std::min(o.labels.find(',', start), o.labels.size());
    load.labels.push_back(o.labels.substr(start, comma - start));
    VP_REQUIRE(!load.labels.back().empty(), "--labels: empty label name in \"", o.labels,
               "\" (expected NAME,NAME,...)");
    start = comma + 1;
  }
  LoadedModel model = load_model(o.model, load);
  const ImageReadOptions reading = resolve_image_read(o.read, model.preprocessor, model.directory.string());
  const ViTConfig& c = model.config;
  VP_REQUIRE(c.num_labels() > 0, o.model, ": the model has no classifier labels to predict");
  const ImageProcessor processor(model.preprocessor);
  const auto [fixed_w, fixed_h] = model.preprocessor.fixed_output_size();
  VP_REQUIRE(fixed_w == 0 || (fixed_w == c.input_size() && fixed_h == c.input_size()), o.model,
             ": preprocessor_config.json produces ", fixed_w, "x", fixed_h, " images (", model.preprocessor.geometry(),
             ") but the model takes ", c.input_size(), "x", c.input_size(), " images");

  auto backend = make_cpu_backend();
  StageOptions so;
  so.training = false;
  so.max_micro_batch = std::min<int64_t>(o.batch_size, static_cast<int64_t>(o.images.size()));
  ViTStage stage(model.parameters.layout_ptr(), *backend, so);
  stage.load_values(model.parameters);

  // transformers' image-classification pipeline: sigmoid for multi-label or a single label (softmax over one logit
  // would always say 1), softmax otherwise.
  const bool multi = c.problem_type == ProblemType::multi_label || c.num_labels() == 1;
  const int64_t labels = c.num_labels();
  if (o.format == "csv") {
    std::printf("image");
    for (const auto& label : c.labels) std::printf(",%s", csv_escape(label).c_str());
    std::printf("\n");
  }
  const int64_t side = c.input_size(), pixels = c.num_channels * side * side;
  for (size_t start = 0; start < o.images.size(); start += static_cast<size_t>(so.max_micro_batch)) {
    const int64_t b = std::min<int64_t>(so.max_micro_batch, static_cast<int64_t>(o.images.size() - start));
    Tensor input = stage.input(0, b);
    for (int64_t i = 0; i < b; ++i) {
      const std::string& path = o.images[start + static_cast<size_t>(i)];
      const DecodedImage image = decode_image_file_keep_gray(path, reading);
      // Without a fixed output size the image keeps its own (or its aspect), which must then be the model's.
      const int64_t out_h = processor.output_height(image.width, image.height);
      const int64_t out_w = processor.output_width(image.width, image.height);
      VP_REQUIRE(out_h == side && out_w == side, path, ": the image is ", image.width, "x", image.height,
                 " and preprocessor_config.json ",
                 model.preprocessor.do_resize
                     ? concat("(", model.preprocessor.geometry(), ") makes it ", out_w, "x", out_h)
                     : std::string("has do_resize false"),
                 ", but the model takes ", side, "x", side, " images");
      processor.process(image, input.f32() + i * pixels);
    }
    stage.forward(0, b);
    const Tensor logits = stage.output(0, b);
    for (int64_t i = 0; i < b; ++i) {
      const float* z = logits.f32() + i * labels;
      std::vector<double> p(static_cast<size_t>(labels));
      if (multi) {
        for (int64_t l = 0; l < labels; ++l)
          p[static_cast<size_t>(l)] = 1.0 / (1.0 + std::exp(-static_cast<double>(z[l])));
      } else {
        double max = z[0], sum = 0;
        for (int64_t l = 1; l < labels; ++l) max = std::max(max, static_cast<double>(z[l]));
        for (int64_t l = 0; l < labels; ++l) sum += std::exp(z[l] - max);
        for (int64_t l = 0; l < labels; ++l) p[static_cast<size_t>(l)] = std::exp(z[l] - max) / sum;
      }
      const std::string& path = o.images[start + static_cast<size_t>(i)];
      if (o.format == "json") {
        nlohmann::json probabilities = nlohmann::json::object();
        std::vector<float> raw(z, z + labels);
        for (int64_t l = 0; l < labels; ++l)
          probabilities[c.labels[static_cast<size_t>(l)]] = p[static_cast<size_t>(l)];
        nlohmann::json line = {{"image", path}, {"logits", raw}, {"probabilities", probabilities}};
        std::printf("%s\n", line.dump().c_str());
      } else {
        std::printf("%s", csv_escape(path).c_str());
        for (double v : p) std::printf(",%.6g", v);
        std::printf("\n");
      }
    }
  }
  if (!o.heatmap_dir.empty()) {
    ExplainRequest request;
    request.out_dir = o.heatmap_dir;
    request.reading = reading;
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
  cmd->callback([o] { run_predict(*o); });
}

}  // namespace vitpipe::cli
