// Evaluation on a split: forward passes through the pipeline (every replica its slice), scores (the logits for
// multi-label, which rank rows as their sigmoids do; softmax for single-label) gathered to rank 0 in dataset order,
// then loss, per-label ROC-AUC and PR-AUC (scikit-learn's definitions) and optional bootstrap confidence intervals.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "evaluation/operating_thresholds.h"
#include "evaluation/ranking_metrics.h"
#include "io/preprocessor_config.h"
#include "parallel/pipeline_executor.h"

namespace vitpipe {

struct EvaluationReport {
  std::string split;
  int64_t rows = 0;
  double loss = 0;  // mean BCE-with-logits over the known labels of the rows (multi-label) or cross-entropy over rows
  std::vector<std::string> labels;
  EvaluationMetrics metrics;     // a label's metrics over the rows where it is known (metrics.known)
  nlohmann::json label_mapping;  // eval of a model on another dataset's labels: mapped / unmapped / unused (or null)
  // Per row, in dataset order (rank 0 only): the item, its scores as ranked (multi-label: the logits; single-label:
  // the softmax probabilities), its targets and their weights (0 = the label is unknown for that row; empty when
  // every label is known), labels.size() values each.
  bool scores_are_logits = true;
  std::vector<int64_t> items;
  std::vector<float> scores, targets, weights;
  // Operating points at thresholds chosen elsewhere (eval --thresholds), per label; `optimistic` when they were
  // chosen on this very split.
  std::optional<ThresholdSet> thresholds;
  std::vector<LabelOperatingPoints> operating_points;
  bool thresholds_optimistic = false;

  // The rows' probabilities ([rows, labels]): the sigmoid of the logits in double (as --save-predictions writes
  // them), or the softmax scores.
  std::vector<double> probabilities() const;
  // Fills thresholds / operating_points / thresholds_optimistic; `data` names the evaluated dataset.
  void apply(const ThresholdSet& chosen, const std::string& data);

  // {"split", "rows", "loss", "auc": {label: value|null}, "mean_auc", "pr_auc": {...}, "mean_pr_auc",
  //  "auc_ci"/"mean_auc_ci" and "ci_unit" (patient or image) with a bootstrap, "known": rows per label with a
  //  known value, "label_mapping" when labels were mapped, "operating_points": {"source": {"file", "chosen_on",
  //  "step", "data"}, "optimistic", "per_label": {label: {"youden", "sensitivity_90"}}} or null,
  //  "detail": positives per label and everything else}
  nlohmann::json to_json() const;
  std::string table() const;  // a readable per-label table
};

struct EvaluationSettings {
  int64_t micro_batch = 8;  // rows per forward pass (at most the stages' max micro-batch)
  int micro_batches = 4;    // per replica per step
  int loader_threads = 2;
  std::optional<BootstrapOptions> bootstrap;
  bool progress = true;
};

// Collective over the executor's world. `dataset` and `preprocessor` are needed on first-stage ranks (they load the
// images); the result is complete on rank 0 only.
EvaluationReport evaluate_split(PipelineExecutor& executor, Communicator& world,
                                const std::shared_ptr<const Dataset>& dataset, Split split,
                                const PreprocessorConfig& preprocessor, const EvaluationSettings& settings);

}  // namespace vitpipe
