// The operating points `serve` flags findings at: thresholds chosen on a validation split (train's thresholds.json),
// never tuned here. Found, first that exists: --thresholds FILE; MODEL_DIR/thresholds.json; the thresholds.json of
// the training run the model's card names (its marker), when the card says these weights are the ones that run
// evaluated. Without any the page says "no operating point".
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "evaluation/operating_thresholds.h"

namespace vitpipe {

struct ServedThresholds {
  ThresholdSet thresholds;
  std::string source;  // where they came from, in words without a path (what /v1/model may disclose)
};

// Throws vitpipe::Error naming the file when a thresholds file that applies is malformed (or `explicit_file` is
// missing); a card naming a run that is gone is not an error (nullopt).
std::optional<ServedThresholds> find_served_thresholds(const std::filesystem::path& model_dir,
                                                       const std::string& explicit_file);

// /v1/model's "operating_points": {"chosen_on", "step", "source", "findings": {label: {"youden", "sensitivity_90"}}}
// for the model's labels (null thresholds where the file has none for a label), or null.
nlohmann::json served_thresholds_json(const std::optional<ServedThresholds>& served,
                                      const std::vector<std::string>& labels);

}  // namespace vitpipe
