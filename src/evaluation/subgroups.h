// Performance by subgroup (sex, age band, view, a csv's columns): per finding the ROC-AUC of each subgroup's rows with
// a bootstrap interval, the largest gap between two subgroups of one attribute with an interval for the gap, and at
// thresholds chosen on another split each subgroup's TPR/FPR and underdiagnosis rate (Seyyed-Kalantari et al., Nature
// Medicine 2021: of the images with at least one finding, the share the model calls "No Finding", i.e. every finding
// below its threshold). Every subgroup is scored on the SAME resamples of the whole split's patients (a resample keeps
// the rows of its drawn patients that fall in the subgroup), so two subgroups' AUCs are paired per resample and a gap's
// interval is the percentile interval of the per-resample differences.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "evaluation/calibration.h"
#include "evaluation/curves.h"
#include "evaluation/operating_point.h"
#include "evaluation/operating_thresholds.h"
#include "evaluation/ranking_metrics.h"
#include "evaluation/subgroup_attributes.h"

namespace vitpipe {

// One split's rows, [rows, labels] row-major.
struct SubgroupData {
  std::vector<std::string> labels;
  std::span<const float> scores;          // as ranked (logits or probabilities)
  std::span<const float> targets;         // 0/1
  std::span<const float> weights;         // 1 known / 0 masked; empty = all known
  std::span<const double> probabilities;  // compared with thresholds
  bool multi_label = true;                // underdiagnosis needs findings that can all be absent
};

struct SubgroupLabel {
  std::optional<double> auc;  // nullopt: too few positives (or negatives) in the subgroup for an AUC
  std::optional<ConfidenceInterval> ci;
  // The rest: the images of the attribute's other groups (those the attribute left out are in neither). The gap is
  // auc - rest_auc, its interval over the same resamples (paired); nullopt where either AUC is undefined.
  std::optional<double> rest_auc, gap_vs_rest;
  std::optional<ConfidenceInterval> gap_vs_rest_ci;
  int64_t positives = 0, negatives = 0;
  std::optional<OperatingPoint> youden, sensitivity_90;  // at the given thresholds
};

struct Underdiagnosis {
  int64_t with_finding = 0;  // images with at least one positive finding (every finding known)
  // Share of them with every finding below its threshold; nullopt with no such image or no threshold.
  std::optional<double> youden, sensitivity_90;
};

struct SubgroupResult {
  std::string attribute, group;
  int64_t images = 0, patients = 0;
  std::vector<SubgroupLabel> labels;
  std::optional<Underdiagnosis> underdiagnosis;  // with thresholds, multi-label only
};

// Per finding and attribute: the subgroups with the highest and the lowest AUC, and high minus low.
struct SubgroupGap {
  size_t label = 0;
  std::string attribute, high, low;
  double high_auc = 0, low_auc = 0, gap = 0;
  std::optional<ConfidenceInterval> ci;  // over resamples where both are defined
};

struct SubgroupAnalysis {
  std::vector<std::string> labels;
  std::vector<SubgroupResult> groups;  // by attribute as given, groups in sorted order
  // Per finding its largest gap over the attributes, largest first (findings without two scored subgroups absent).
  std::vector<SubgroupGap> gaps;
  std::map<std::string, std::map<std::string, int64_t>> left_out;  // attribute -> reason -> images
  std::vector<std::optional<double>> overall_auc;                  // the whole split, for comparison
  std::vector<std::optional<ConfidenceInterval>> overall_ci;
  std::optional<ThresholdSet> thresholds;  // where the operating points come from
  std::string ci_unit;                     // "patient" / "image"; "" without a bootstrap
};

// `patients`: per row ("" = unknown), only counted (the resampling unit is bootstrap->cluster_of_row). Attributes
// whose rows have no group at all are skipped. Throws when an attribute's row count is not the data's.
SubgroupAnalysis analyze_subgroups(const std::vector<SubgroupAttribute>& attributes, const SubgroupData& data,
                                   const std::vector<std::string>& patients,
                                   const std::optional<BootstrapOptions>& bootstrap,
                                   const std::optional<ThresholdSet>& thresholds);

// The top-level "subgroups" array: {"attribute", "group", "images", "patients", "roc_auc": {finding: {"value", "ci":
// {"low", "high", "unit", "resamples", "skipped"} | null, "positives", "negatives", "too_few", "rest": AUC | null,
// "gap_vs_rest": AUC - rest | null, "gap_vs_rest_ci": ci | null}}, "operating_points":
// {finding: {"youden": {"threshold", "tpr", "fpr", "tp", "fp", "tn", "fn"} | null, "sensitivity_90": ...}} | null,
// "underdiagnosis": {"images_with_finding", "youden", "sensitivity_90"} | null}.
nlohmann::json subgroups_json(const SubgroupAnalysis& analysis);
// "subgroup_gaps": [{"finding", "attribute", "high": {"group", "auc"}, "low": {...}, "gap", "ci"}], largest first.
nlohmann::json subgroup_gaps_json(const SubgroupAnalysis& analysis);
// "subgroup_left_out": {attribute: {reason: images}}.
nlohmann::json subgroup_left_out_json(const SubgroupAnalysis& analysis);

// A compact text table: the gaps first, then per finding each subgroup's AUC, then TPR/FPR at the Youden threshold.
std::string subgroups_table(const SubgroupAnalysis& analysis);

}  // namespace vitpipe
