// `eval --boxes`: each radiologist's box of a split's image scored against the model's heatmap of the box's finding
// (evaluation/box_localization.h), summarised per finding. Boxes whose image is not in the split, or whose finding
// the model lacks, are counted and skipped with the reason.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backend/device_selection.h"
#include "data/dataset.h"
#include "evaluation/box_list.h"
#include "evaluation/box_localization.h"
#include "explain/attention_maps.h"
#include "io/model_files.h"

namespace vitpipe {

// One of the worst-localized boxes, drawn for the report: the finding's heatmap over the radiograph with the box
// outlined, as PNG.
struct LocalizedBox {
  std::string image, finding;
  FindingBox box;  // in the pixels of the image as read
  BoxScore score;
  double probability = 0;
  std::vector<uint8_t> overlay_png;
};

struct BoxLocalizationResult {
  std::string method;
  int64_t evaluated = 0;
  std::map<std::string, int64_t> skipped;     // reason -> boxes
  std::vector<LocalizationSummary> findings;  // in the model's label order, findings with boxes only
  // The `worst_images` worst-localized boxes (pointing misses first, then the lowest IoBB, then the least mass inside;
  // ties in box-list order), with their overlays.
  std::vector<LocalizedBox> worst;
};

BoxLocalizationResult localize_boxes(const LoadedModel& model, const Dataset& dataset, Split split,
                                     const std::vector<FindingBox>& boxes, ExplainMethod method, Device device,
                                     const std::optional<BootstrapOptions>& bootstrap, size_t worst_images = 0);

// {"boxes", "method", "skipped": {reason: n}, "per_finding": {finding: localization_json}}, and with worst images
// "worst_images": [{"image", "finding", "box": {"x", "y", "w", "h"}, "pointing_hit", "iobb", "iou", "mass_inside",
// "probability", "overlay_png": base64}]
nlohmann::json localization_result_json(const BoxLocalizationResult& result);
std::string localization_table(const BoxLocalizationResult& result);

}  // namespace vitpipe
