// Operating points chosen on one split and applied unchanged to others. A threshold tuned on the split it scores
// flatters that split (the test table would report the best sensitivity/specificity the test set allows), so train
// writes the val split's thresholds to RUN_DIR/thresholds.json, and the report and `eval --thresholds` apply them.
// Thresholds are predicted probabilities: a row is positive when its probability >= the threshold.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "evaluation/calibration.h"
#include "evaluation/curves.h"
#include "evaluation/operating_point.h"

namespace vitpipe {

struct ThresholdSet {
  std::string chosen_on;        // the split the thresholds were chosen on ("val")
  std::string data;             // that split's dataset ("" when not known)
  std::optional<int64_t> step;  // the model's training step (the exported weights')
  std::string file;             // where they were read from ("" when computed here)
  std::vector<std::string> labels;
  // Per label: the Youden threshold and the highest threshold reaching 90% sensitivity; nullopt where the split
  // lacks a class (or positives) for that label.
  std::vector<std::optional<double>> youden, sensitivity_90;
};

// Chosen on `probabilities` ([rows, labels] row-major) with 0/1 `targets`; `weights` (same shape, 0 = unknown) may
// be empty. Youden: curves.h's youden_point; 90% sensitivity: point_at_sensitivity(0.9).
ThresholdSet choose_thresholds(const std::vector<std::string>& labels, std::span<const double> probabilities,
                               std::span<const float> targets, std::span<const float> weights,
                               const std::string& chosen_on);

// {"format": "vitpipe-thresholds", "version": 1, "chosen_on", "data", "step", "score": "probability",
//  "findings": {label: {"youden": t|null, "sensitivity_90": t|null}}}
nlohmann::json thresholds_to_json(const ThresholdSet& thresholds);
void write_thresholds_file(const std::filesystem::path& path, const ThresholdSet& thresholds);
// Refuses anything else with one line naming the file and the field.
ThresholdSet read_thresholds_file(const std::filesystem::path& path);

// One label's operating points at the given thresholds.
struct LabelOperatingPoints {
  std::optional<OperatingPoint> youden, sensitivity_90;
};

// `thresholds` applied to a split's probabilities ([rows, labels.size()]), by label name: a label the thresholds
// lack, or whose threshold is undefined, gets no point.
std::vector<LabelOperatingPoints> apply_thresholds(const ThresholdSet& thresholds,
                                                   const std::vector<std::string>& labels,
                                                   std::span<const double> probabilities,
                                                   std::span<const float> targets, std::span<const float> weights);

// True when the thresholds were tuned on the split they score: its numbers are optimistic.
bool tuned_on(const ThresholdSet& thresholds, const std::string& split, const std::string& data);

// {"threshold", "sensitivity", "specificity", "ppv", "npv", "tp", "fp", "tn", "fn"} or null.
nlohmann::json operating_point_json(const std::optional<OperatingPoint>& point);

}  // namespace vitpipe
