// Ranking metrics of multi-label classification, computed the way scikit-learn does: ROC-AUC as roc_auc_score
// (ties share their average rank, i.e. the trapezoid over distinct thresholds) and PR-AUC as
// average_precision_score (step-wise sum over distinct thresholds, tied scores form one threshold).
// Inputs are row-major [rows, num_labels] fp32 scores (logits or probabilities: both metrics only use the order)
// and targets that are exactly 0 or 1.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "evaluation/bootstrap.h"

namespace vitpipe {

// One label. std::nullopt when the metric is undefined: ROC-AUC when only one class is present, average
// precision when there is no positive (scikit-learn warns and returns 0 there; we call it undefined). Throws
// vitpipe::Error for mismatched sizes, a NaN score or a target other than 0/1.
std::optional<double> roc_auc(std::span<const float> scores, std::span<const float> targets);
std::optional<double> average_precision(std::span<const float> scores, std::span<const float> targets);

// One metric over all labels.
struct LabelMetrics {
  std::vector<std::optional<double>> per_label;
  std::optional<double> mean;  // over the labels where the metric is defined; nullopt when none is
  int64_t defined_labels = 0;
  // Filled only when a bootstrap was asked for. The mean's interval uses the resamples where every label
  // defined on the full data is defined too.
  std::vector<std::optional<ConfidenceInterval>> per_label_ci;
  std::optional<ConfidenceInterval> mean_ci;
};

struct EvaluationMetrics {
  int64_t rows = 0;
  int64_t num_labels = 0;
  std::vector<int64_t> positives;  // per label
  std::vector<int64_t> known;      // per label: the rows whose label is known (rows minus the masked ones)
  LabelMetrics roc_auc;
  LabelMetrics average_precision;
};

// Both metrics per label (columns of [rows, num_labels]); with `bootstrap`, percentile intervals from resampling
// rows (or clusters of rows: BootstrapOptions::cluster_of_row) with replacement (the same resamples for every label
// and both metrics; resample b draws from Rng({seed, b}), so results do not depend on the thread count). Sorts each
// label once; a resample is a vector of per-row counts, so it costs one pass over the sorted rows per label. `weights`
// (optional, same shape, 1 known / 0 masked): a label's metrics use only the rows where it is known (the bootstrap
// resamples rows, so a resample's label uses its drawn rows where that label is known).
EvaluationMetrics evaluate_multilabel(std::span<const float> scores, std::span<const float> targets, int64_t num_labels,
                                      const std::optional<BootstrapOptions>& bootstrap = {},
                                      std::span<const float> weights = {});

// The per-resample statistics behind the intervals, for tests and reports: [resamples][label], nullopt where the
// label lacks a class in that resample.
struct BootstrapDistribution {
  std::vector<std::vector<std::optional<double>>> roc_auc;
  std::vector<std::vector<std::optional<double>>> average_precision;
};
// `weights` as evaluate_multilabel's: a label uses only its known rows of each resample (subgroups pass 0 for the rows
// outside the subgroup, so every subgroup is scored on the same resamples).
BootstrapDistribution bootstrap_distribution(std::span<const float> scores, std::span<const float> targets,
                                             int64_t num_labels, const BootstrapOptions& options,
                                             std::span<const float> weights = {});

// {"rows", "num_labels", "roc_auc": {"mean", "mean_ci", "defined_labels", "per_label": {name: {"value", "ci",
// "positives"}}}, "average_precision": {...}}; undefined values are null; a "ci" is {"low", "high", "resamples",
// "skipped", "unit"}. `label_names` may be empty (then "0",
// "1", ...).
nlohmann::json metrics_to_json(const EvaluationMetrics& metrics, const std::vector<std::string>& label_names);

}  // namespace vitpipe
