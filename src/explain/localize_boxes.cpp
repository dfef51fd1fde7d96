#include "explain/localize_boxes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "backend/backend.h"
#include "data/image_processor.h"
#include "data/png_encoder.h"
#include "explain/box_outline.h"
#include "explain/heatmap_overlay.h"
#include "explain/model_explainer.h"
#include "util/base64.h"

namespace vitpipe {

BoxLocalizationResult localize_boxes(const LoadedModel& model, const Dataset& dataset, Split split,
                                     const std::vector<FindingBox>& boxes, ExplainMethod method, Device device,
                                     const std::optional<BootstrapOptions>& bootstrap, size_t worst_images) {
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
  struct Scored {
    int64_t item;
    size_t label;
    FindingBox box;  // in the image's pixels
    BoxScore score;
  };
  std::vector<Scored> scored;
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
    const FindingBox in_image = box_in_image(box, image.width, image.height);
    const BoxScore score = score_box(full, image.width, image.height, in_image);
    scores[static_cast<size_t>(label - labels.begin())].push_back(score);
    if (worst_images > 0)
      scored.push_back({item->second, static_cast<size_t>(label - labels.begin()), in_image, score});
    ++out.evaluated;
  }
  for (size_t l = 0; l < labels.size(); ++l)
    if (!scores[l].empty()) out.findings.push_back(summarize_boxes(labels[l], scores[l], bootstrap));
  // The worst-localized boxes, drawn again for the report (one more pass each; only these few are kept as images).
  std::stable_sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
    if (a.score.hit != b.score.hit) return !a.score.hit;
    if (a.score.iobb != b.score.iobb) return a.score.iobb < b.score.iobb;
    return a.score.mass_inside < b.score.mass_inside;
  });
  scored.resize(std::min(scored.size(), worst_images));
  for (const Scored& s : scored) {
    const DecodedImage image = dataset.load_decoded(s.item);
    processor.process(image, explainer.pixels());
    const double probability = explainer.probabilities()[s.label];
    const PatchMap map = explainer.explain(static_cast<int64_t>(s.label), method);
    DecodedImage overlay = heatmap_overlay(image, map, OverlayCaption{labels[s.label], probability, out.method},
                                           processor.input_region(image.width, image.height));
    draw_box_outline(overlay, s.box, overlay_scale(image.width, image.height));
    out.worst.push_back({std::filesystem::path(dataset.name(s.item)).filename().string(), labels[s.label], s.box,
                         s.score, probability, encode_png(overlay)});
  }
  return out;
}

nlohmann::json localization_result_json(const BoxLocalizationResult& r) {
  nlohmann::json per = nlohmann::json::object();
  for (const auto& f : r.findings) per[f.finding] = localization_json(f);
  nlohmann::json out = {{"boxes", r.evaluated}, {"method", r.method}, {"skipped", r.skipped}, {"per_finding", per}};
  if (!r.worst.empty()) {
    nlohmann::json worst = nlohmann::json::array();
    for (const LocalizedBox& b : r.worst)
      worst.push_back({{"image", b.image},
                       {"finding", b.finding},
                       {"box", {{"x", b.box.x}, {"y", b.box.y}, {"w", b.box.w}, {"h", b.box.h}}},
                       {"pointing_hit", b.score.hit},
                       {"iobb", b.score.iobb},
                       {"iou", b.score.iou},
                       {"mass_inside", b.score.mass_inside},
                       {"probability", b.probability},
                       {"overlay_png", base64(std::string_view(reinterpret_cast<const char*>(b.overlay_png.data()),
                                                               b.overlay_png.size()))}});
    out["worst_images"] = std::move(worst);
  }
  return out;
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
