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

struct BoxLocalizationResult {
  std::string method;
  int64_t evaluated = 0;
  std::map<std::string, int64_t> skipped;     // reason -> boxes
  std::vector<LocalizationSummary> findings;  // in the model's label order, findings with boxes only
};

BoxLocalizationResult localize_boxes(const LoadedModel& model, const Dataset& dataset, Split split,
                                     const std::vector<FindingBox>& boxes, ExplainMethod method, Device device,
                                     const std::optional<BootstrapOptions>& bootstrap);

// {"boxes", "method", "skipped": {reason: n}, "per_finding": {finding: localization_json}}
nlohmann::json localization_result_json(const BoxLocalizationResult& result);
std::string localization_table(const BoxLocalizationResult& result);

}  // namespace vitpipe
