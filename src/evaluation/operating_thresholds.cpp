#include "evaluation/operating_thresholds.h"

#include <algorithm>
#include <cmath>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_error_detail.h"

namespace vitpipe {
namespace {

// Column `label` of [rows, labels]: probabilities, targets and weights (all 1 when `weights` is empty).
struct Column {
  std::vector<double> probabilities;
  std::vector<float> targets, weights;
};

Column column(std::span<const double> probabilities, std::span<const float> targets, std::span<const float> weights,
              size_t labels, size_t label) {
  VP_REQUIRE(labels > 0 && probabilities.size() % labels == 0 && targets.size() == probabilities.size() &&
                 (weights.empty() || weights.size() == probabilities.size()),
             "operating points: probabilities, targets and weights do not form rows of ", labels, " labels");
  const size_t rows = probabilities.size() / labels;
  Column c;
  c.probabilities.resize(rows);
  c.targets.resize(rows);
  c.weights.assign(rows, 1.0f);
  for (size_t r = 0; r < rows; ++r) {
    c.probabilities[r] = probabilities[r * labels + label];
    c.targets[r] = targets[r * labels + label];
    if (!weights.empty()) c.weights[r] = weights[r * labels + label];
  }
  return c;
}

std::optional<double> threshold_of(const std::optional<OperatingPoint>& point) {
  return point ? std::optional<double>(point->threshold) : std::nullopt;
}

nlohmann::json optional_json(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

std::optional<double> read_threshold(const nlohmann::json& finding, const char* key, const std::string& where) {
  if (!finding.contains(key) || finding[key].is_null()) return std::nullopt;
  VP_REQUIRE(finding[key].is_number(), where, ".", key, ": expected a probability threshold or null");
  const double t = finding[key].get<double>();
  // A threshold is a predicted probability that the chosen point reached.
  VP_REQUIRE(std::isfinite(t) && t >= 0.0 && t <= 1.0, where, ".", key, ": expected a probability in [0, 1], got ", t);
  return t;
}

}  // namespace

ThresholdSet choose_thresholds(const std::vector<std::string>& labels, std::span<const double> probabilities,
                               std::span<const float> targets, std::span<const float> weights,
                               const std::string& chosen_on) {
  ThresholdSet t;
  t.chosen_on = chosen_on;
  t.labels = labels;
  for (size_t l = 0; l < labels.size(); ++l) {
    const Column c = column(probabilities, targets, weights, labels.size(), l);
    const RankedLabel ranked = rank_label(c.probabilities, c.targets, c.weights);
    t.youden.push_back(threshold_of(youden_point(ranked)));
    t.sensitivity_90.push_back(threshold_of(point_at_sensitivity(ranked, 0.9)));
  }
  return t;
}

nlohmann::json thresholds_to_json(const ThresholdSet& t) {
  nlohmann::json findings = nlohmann::json::object();
  for (size_t l = 0; l < t.labels.size(); ++l) {
    findings[t.labels[l]] = {{"youden", optional_json(t.youden[l])},
                             {"sensitivity_90", optional_json(t.sensitivity_90[l])}};
  }
  return {{"format", "vitpipe-thresholds"},
          {"version", 1},
          {"chosen_on", t.chosen_on},
          {"data", t.data},
          {"step", t.step ? nlohmann::json(*t.step) : nlohmann::json()},
          {"score", "probability"},
          {"findings", findings}};
}

void write_thresholds_file(const std::filesystem::path& path, const ThresholdSet& thresholds) {
  write_text_file_atomically(path, thresholds_to_json(thresholds).dump(2) + "\n");
}

ThresholdSet read_thresholds_file(const std::filesystem::path& path) {
  const std::string where = path.string();
  VP_REQUIRE(std::filesystem::is_regular_file(path), where, ": no such file (train writes RUN_DIR/thresholds.json)");
  nlohmann::json j;
  const std::string text = read_text_file(path);
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(where, ": not JSON (expected train's thresholds.json)", json_error_detail(e, text));
  }
  VP_REQUIRE(j.is_object() && j.value("format", "") == "vitpipe-thresholds", where,
             ": \"format\" must be \"vitpipe-thresholds\" (train's thresholds.json)");
  VP_REQUIRE(j.value("version", 0) == 1, where, ": \"version\" must be 1");
  VP_REQUIRE(j.contains("chosen_on") && j["chosen_on"].is_string() && !j["chosen_on"].get<std::string>().empty(), where,
             ": \"chosen_on\" must name the split the thresholds were chosen on");
  VP_REQUIRE(j.value("score", "") == "probability", where, ": \"score\" must be \"probability\"");
  VP_REQUIRE(j.contains("findings") && j["findings"].is_object() && !j["findings"].empty(), where,
             ": \"findings\" must be an object of finding -> thresholds");
  ThresholdSet t;
  t.file = where;
  t.chosen_on = j["chosen_on"].get<std::string>();
  if (j.contains("data") && j["data"].is_string()) t.data = j["data"].get<std::string>();
  if (j.contains("step") && !j["step"].is_null()) {
    VP_REQUIRE(j["step"].is_number_integer() && j["step"].get<int64_t>() >= 0, where,
               ": \"step\" must be a non-negative integer or null");
    t.step = j["step"].get<int64_t>();
  }
  for (const auto& [label, finding] : j["findings"].items()) {
    const std::string at = where + ": findings." + label;
    VP_REQUIRE(finding.is_object(), at, ": expected {\"youden\", \"sensitivity_90\"}");
    t.labels.push_back(label);
    t.youden.push_back(read_threshold(finding, "youden", at));
    t.sensitivity_90.push_back(read_threshold(finding, "sensitivity_90", at));
  }
  return t;
}

std::vector<LabelOperatingPoints> apply_thresholds(const ThresholdSet& thresholds,
                                                   const std::vector<std::string>& labels,
                                                   std::span<const double> probabilities,
                                                   std::span<const float> targets, std::span<const float> weights) {
  std::vector<LabelOperatingPoints> out(labels.size());
  for (size_t l = 0; l < labels.size(); ++l) {
    const auto found = std::find(thresholds.labels.begin(), thresholds.labels.end(), labels[l]);
    if (found == thresholds.labels.end()) continue;
    const size_t k = static_cast<size_t>(found - thresholds.labels.begin());
    const Column c = column(probabilities, targets, weights, labels.size(), l);
    const RankedLabel ranked = rank_label(c.probabilities, c.targets, c.weights);
    if (thresholds.youden[k]) out[l].youden = operating_point(ranked, *thresholds.youden[k]);
    if (thresholds.sensitivity_90[k]) out[l].sensitivity_90 = operating_point(ranked, *thresholds.sensitivity_90[k]);
  }
  return out;
}

bool tuned_on(const ThresholdSet& thresholds, const std::string& split, const std::string& data) {
  return thresholds.chosen_on == split && (thresholds.data.empty() || data.empty() || thresholds.data == data);
}

nlohmann::json operating_point_json(const std::optional<OperatingPoint>& op) {
  if (!op) return nullptr;
  return {{"threshold", op->threshold},
          {"sensitivity", op->sensitivity()},
          {"specificity", op->specificity()},
          {"ppv", optional_json(op->ppv())},
          {"npv", optional_json(op->npv())},
          {"tp", op->tp},
          {"fp", op->fp},
          {"tn", op->tn},
          {"fn", op->fn}};
}

}  // namespace vitpipe
