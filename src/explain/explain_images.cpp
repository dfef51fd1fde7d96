#include "explain/explain_images.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "backend/backend.h"
#include "backend/device_selection.h"
#include "data/image.h"
#include "data/image_processor.h"
#include "data/png_encoder.h"
#include "explain/heatmap_overlay.h"
#include "explain/model_explainer.h"
#include "explain/npy_file.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

// A file-name-safe form of a label or image stem.
std::string file_part(const std::string& name) {
  std::string out;
  for (char ch : name) out += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.') ? ch : '_';
  return out.empty() ? "_" : out;
}

std::vector<int64_t> labels_to_explain(const ViTConfig& c, const std::string& model_name,
                                       const std::vector<std::string>& findings, int64_t top,
                                       const std::vector<double>& probabilities) {
  std::vector<int64_t> out;
  for (const std::string& f : findings) {
    const auto it = std::find(c.labels.begin(), c.labels.end(), f);
    if (it == c.labels.end()) {
      std::string known;
      for (const auto& l : c.labels) known += (known.empty() ? "" : ", ") + l;
      fail("--finding: '", f, "' is not a label of ", model_name, " (its labels: ", known, ")");
    }
    out.push_back(it - c.labels.begin());
  }
  if (!out.empty()) return out;
  std::vector<int64_t> order(probabilities.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return probabilities[static_cast<size_t>(a)] > probabilities[static_cast<size_t>(b)];
  });
  order.resize(static_cast<size_t>(std::min<int64_t>(top, static_cast<int64_t>(order.size()))));
  return order;
}

}  // namespace

std::vector<ExplainedMap> explain_images(const LoadedModel& model, const std::string& model_name,
                                         const std::vector<std::string>& images, const ExplainRequest& request) {
  const ViTConfig& c = model.config;
  VP_REQUIRE(request.top >= 1, "--top: expected at least 1, got ", request.top);
  VP_REQUIRE(!request.methods.empty(), "explain: no --method given");
  check_rollout_options(request.rollout);
  labels_to_explain(c, model_name, request.findings, 1, std::vector<double>(static_cast<size_t>(c.num_labels())));
  const ImageProcessor processor(model.preprocessor);
  auto backend = make_backend(request.device, request.allow_tf32);
  ModelExplainer explainer(model, *backend);
  OutputFolder folder = request.out_folder;
  if (folder.dir.empty()) folder = check_output_folder(request.out_dir, "explain", "--out", false);
  remove_previous_output(folder);
  create_output_folder(folder);

  std::vector<ExplainedMap> out;
  std::map<std::string, int> stems;
  for (const std::string& path : images) {
    const DecodedImage image = decode_image_file_keep_gray(path, request.reading);
    const int64_t side = c.input_size();
    VP_REQUIRE(processor.output_height(image.width, image.height) == side &&
                   processor.output_width(image.width, image.height) == side,
               path, ": the image is ", image.width, "x", image.height, " and preprocessor_config.json (",
               model.preprocessor.geometry(), ") does not make it the ", side, "x", side, " the model takes");
    processor.process(image, explainer.pixels());
    const std::vector<double> p = explainer.probabilities();
    std::string stem = file_part(std::filesystem::path(path).stem().string());
    if (const int seen = stems[stem]++; seen > 0) stem += "-" + std::to_string(seen + 1);
    for (const int64_t label : labels_to_explain(c, model_name, request.findings, request.top, p)) {
      for (const ExplainMethod method : request.methods) {
        const PatchMap map = explainer.explain(label, method, request.rollout);
        ExplainedMap e;
        e.image = path;
        e.finding = c.labels[static_cast<size_t>(label)];
        e.method = explain_method_name(method);
        e.probability = p[static_cast<size_t>(label)];
        e.grid_height = map.grid_height;
        e.grid_width = map.grid_width;
        const std::string base = stem + "." + file_part(e.finding) + "." + e.method;
        e.overlay = base + ".png";
        e.map = base + ".npy";
        const std::vector<uint8_t> png =
            encode_png(heatmap_overlay(image, map, OverlayCaption{e.finding, e.probability, e.method},
                                       processor.input_region(image.width, image.height)));
        AtomicFileWriter file(request.out_dir / e.overlay);
        file.write(png.data(), png.size());
        file.commit();
        write_npy_float32(request.out_dir / e.map, {map.grid_height, map.grid_width}, map.values);
        out.push_back(e);
      }
    }
  }
  nlohmann::json index = {{"model", model_name}, {"maps", nlohmann::json::array()}};
  for (const ExplainedMap& e : out) {
    nlohmann::json entry = {{"image", e.image},
                            {"finding", e.finding},
                            {"method", e.method},
                            {"probability", e.probability},
                            {"overlay", e.overlay},
                            {"map", e.map},
                            {"grid", {e.grid_height, e.grid_width}}};
    if (e.method == explain_method_name(ExplainMethod::rollout)) {
      entry["head_fusion"] = head_fusion_name(request.rollout.head_fusion);
      entry["discard_ratio"] = request.rollout.discard_ratio;
    }
    index["maps"].push_back(entry);
  }
  write_text_file_atomically(request.out_dir / "index.json", index.dump(2) + "\n");
  std::vector<std::string> files = {"index.json"};
  for (const ExplainedMap& e : out) files.insert(files.end(), {e.overlay, e.map});
  mark_output_folder(folder, files);
  return out;
}

}  // namespace vitpipe
