#include "explain/localize_boxes.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "backend/backend.h"
#include "data/image_processor.h"
#include "explain/heatmap_overlay.h"
#include "explain/model_explainer.h"

namespace vitpipe {

BoxLocalizationResult localize_boxes(const LoadedModel& model, const Dataset& dataset, Split split,
                                     const std::vector<FindingBox>& boxes, ExplainMethod method, Device device,
                                     const std::optional<BootstrapOptions>& bootstrap) {
  BoxLocalizationResult out;
  out.method = explain_method_name(method);
  // Boxes name files: the split's items by file name.
  std::unordered_map<std::string, int64_t> item_of;
  for (const int64_t i : dataset.split_indices(split))
    item_of[std::filesystem::path(dataset.name(i)).filename().string()] = i;
  const std::vector<std::string>& labels = model.config.labels;
  std::vector<std::vector<BoxScore>> scores(labels.size());
  const ImageProcessor processor(model.preprocessor);
  auto backend = make_backend(device);
  ModelExplainer explainer(model, *backend);
  for (const FindingBox& box : boxes) {
    const auto item = item_of.find(box.image);
    if (item == item_of.end()) {
      out.skipped[std::string("image not in the ") + split_name(split) + " split"] += 1;
      continue;
    }
    const auto label = std::find(labels.begin(), labels.end(), box.finding);
    if (label == labels.end()) {
      out.skipped["finding not among the model's labels"] += 1;
      continue;
    }
    const DecodedImage image = dataset.load_decoded(item->second);
    processor.process(image, explainer.pixels());
    explainer.probabilities();  // the forward pass explain() differentiates
    const PatchMap map = explainer.explain(label - labels.begin(), method);
    // The map covers the part of the image the model sees (all of it, or a centre crop's place); zero elsewhere.
    const ImageRegion region = processor.input_region(image.width, image.height);
    const int64_t x0 = std::lround(region.x0), y0 = std::lround(region.y0);
    const int64_t rw = std::max<int64_t>(1, std::lround(region.x1) - x0),
                  rh = std::max<int64_t>(1, std::lround(region.y1) - y0);
    const std::vector<float> part = normalised_map_at(map, rw, rh);
    std::vector<float> full(static_cast<size_t>(image.width * image.height), 0.0f);
    for (int64_t j = 0; j < rh && y0 + j < image.height; ++j)
      for (int64_t i = 0; i < rw && x0 + i < image.width; ++i)
        full[static_cast<size_t>((y0 + j) * image.width + x0 + i)] = part[static_cast<size_t>(j * rw + i)];
    scores[static_cast<size_t>(label - labels.begin())].push_back(
        score_box(full, image.width, image.height, box_in_image(box, image.width, image.height)));
    ++out.evaluated;
  }
  for (size_t l = 0; l < labels.size(); ++l)
    if (!scores[l].empty()) out.findings.push_back(summarize_boxes(labels[l], scores[l], bootstrap));
  return out;
}

nlohmann::json localization_result_json(const BoxLocalizationResult& r) {
  nlohmann::json per = nlohmann::json::object();
  for (const auto& f : r.findings) per[f.finding] = localization_json(f);
  return {{"boxes", r.evaluated}, {"method", r.method}, {"skipped", r.skipped}, {"per_finding", per}};
}

std::string localization_table(const BoxLocalizationResult& r) {
  std::ostringstream out;
  char line[256];
  out << "localization on boxes (" << r.method << " maps): " << r.evaluated << " boxes evaluated";
  for (const auto& [reason, n] : r.skipped) out << "; " << n << " skipped (" << reason << ")";
  out << "\n";
  if (r.findings.empty()) return out.str();
  std::snprintf(line, sizeof(line), "  %-20s %6s %9s %11s %9s %9s %9s\n", "finding", "boxes", "pointing", "mass in box",
                "IoBB>0.1", "IoBB>0.3", "IoBB>0.5");
  out << line;
  for (const auto& f : r.findings) {
    std::snprintf(line, sizeof(line), "  %-20s %6lld %9.3f %11.3f %9.3f %9.3f %9.3f\n", f.finding.c_str(),
                  static_cast<long long>(f.boxes), f.pointing, f.mass_inside, f.t_iobb[0], f.t_iobb[2], f.t_iobb[4]);
    out << line;
  }
  return out.str();
}

}  // namespace vitpipe
