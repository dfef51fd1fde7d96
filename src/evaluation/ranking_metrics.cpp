#include "evaluation/ranking_metrics.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

#include "util/error.h"
#include "util/random.h"

namespace vitpipe {
namespace {

// One label's rows in descending score order, packed as (row << 2) | (positive << 1) | last_of_tie_group, so a
// pass over it reads 4 bytes per row.
struct SortedLabel {
  std::vector<uint32_t> entries;
  int64_t positives = 0;
  int64_t negatives = 0;
};

struct RankStats {
  std::optional<double> roc_auc;
  std::optional<double> average_precision;
};

void check_inputs(std::span<const float> scores, std::span<const float> targets, int64_t num_labels,
                  std::span<const float> weights = {}) {
  VP_REQUIRE(num_labels > 0, "metrics: the number of labels must be positive (got ", num_labels, ")");
  VP_REQUIRE(scores.size() == targets.size(), "metrics: ", scores.size(), " scores but ", targets.size(), " targets");
  VP_REQUIRE(scores.size() % static_cast<size_t>(num_labels) == 0, "metrics: ", scores.size(),
             " values do not form rows of ", num_labels, " labels");
  VP_REQUIRE(scores.size() / static_cast<size_t>(num_labels) < (size_t{1} << 30),
             "metrics: too many rows (at most 2^30)");
  VP_REQUIRE(weights.empty() || weights.size() == scores.size(), "metrics: ", weights.size(), " weights for ",
             scores.size(), " scores");
  for (size_t i = 0; i < scores.size(); ++i) {
    const size_t row = i / static_cast<size_t>(num_labels), label = i % static_cast<size_t>(num_labels);
    if (!weights.empty() && weights[i] == 0.0f) continue;  // masked: neither score nor target is used
    VP_REQUIRE(!std::isnan(scores[i]), "metrics: score of row ", row, ", label ", label, " is NaN");
    VP_REQUIRE(targets[i] == 0.0f || targets[i] == 1.0f, "metrics: target of row ", row, ", label ", label, " is ",
               targets[i], ", expected 0 or 1");
  }
}

// Only the rows where the label is known (weight != 0) take part.
SortedLabel sort_label(std::span<const float> scores, std::span<const float> targets, int64_t num_labels, int64_t label,
                       std::span<const float> weights = {}) {
  const int64_t rows = static_cast<int64_t>(scores.size()) / num_labels;
  auto score = [&](int64_t row) { return scores[static_cast<size_t>(row * num_labels + label)]; };
  std::vector<uint32_t> order;
  order.reserve(static_cast<size_t>(rows));
  for (int64_t row = 0; row < rows; ++row)
    if (weights.empty() || weights[static_cast<size_t>(row * num_labels + label)] != 0.0f)
      order.push_back(static_cast<uint32_t>(row));
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return score(a) > score(b); });
  SortedLabel sorted;
  sorted.entries.resize(order.size());
  for (size_t j = 0; j < order.size(); ++j) {
    const uint32_t row = order[j];
    const bool positive = targets[static_cast<size_t>(row * num_labels + label)] == 1.0f;
    const bool last = j + 1 == order.size() || score(order[j + 1]) != score(row);
    sorted.entries[j] = (row << 2) | (positive ? 2u : 0u) | (last ? 1u : 0u);
    (positive ? sorted.positives : sorted.negatives) += 1;
  }
  return sorted;
}

// One pass over the sorted rows, each row counted `counts[row]` times (1 without counts): exactly the metrics of
// the data set where row r appears counts[r] times. The AUC numerator is kept as an exact integer:
// 2 * sum over tie groups of (negatives in group * positives above + positives * negatives in group / 2).
template <bool Weighted>
RankStats rank_stats(const SortedLabel& sorted, const uint32_t* counts) {
  int64_t tp = 0, fp = 0, group_tp = 0, group_fp = 0, auc_twice = 0;
  double ap = 0.0;
  for (const uint32_t entry : sorted.entries) {
    const int64_t w = Weighted ? counts[entry >> 2] : 1;
    const int64_t positive = (entry >> 1) & 1;
    group_tp += w * positive;
    group_fp += w * (1 - positive);
    if (entry & 1u) {
      auc_twice += group_fp * (2 * tp + group_tp);
      tp += group_tp;
      fp += group_fp;
      if (group_tp > 0) ap += static_cast<double>(group_tp) * (static_cast<double>(tp) / static_cast<double>(tp + fp));
      group_tp = group_fp = 0;
    }
  }
  RankStats stats;
  if (tp > 0 && fp > 0) {
    stats.roc_auc = static_cast<double>(auc_twice) / (2.0 * static_cast<double>(tp) * static_cast<double>(fp));
  }
  if (tp > 0) stats.average_precision = ap / static_cast<double>(tp);
  return stats;
}

std::vector<SortedLabel> sort_all(std::span<const float> scores, std::span<const float> targets, int64_t num_labels,
                                  std::span<const float> weights = {}) {
  std::vector<SortedLabel> sorted(static_cast<size_t>(num_labels));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t label = 0; label < num_labels; ++label) {
    sorted[static_cast<size_t>(label)] = sort_label(scores, targets, num_labels, label, weights);
  }
  return sorted;
}

// The number of clusters; refuses ids that are not 0..C-1 each used (an unused id, when drawn, would shrink the
// resample).
int64_t count_clusters(std::span<const uint32_t> cluster_of_row) {
  const uint32_t top = *std::max_element(cluster_of_row.begin(), cluster_of_row.end());
  std::vector<uint8_t> used(static_cast<size_t>(top) + 1, 0);
  for (const uint32_t c : cluster_of_row) used[c] = 1;
  VP_REQUIRE(std::all_of(used.begin(), used.end(), [](uint8_t u) { return u != 0; }),
             "bootstrap: cluster ids must be 0..C-1, each used by a row");
  return static_cast<int64_t>(top) + 1;
}

BootstrapDistribution resample(const std::vector<SortedLabel>& sorted, int64_t rows, const BootstrapOptions& options) {
  VP_REQUIRE(options.resamples > 0, "bootstrap: the number of resamples must be positive (got ", options.resamples,
             ")");
  VP_REQUIRE(options.confidence > 0.0 && options.confidence < 1.0,
             "bootstrap: the confidence level must be in (0, 1) (got ", options.confidence, ")");
  const size_t labels = sorted.size();
  const bool clustered = !options.cluster_of_row.empty();
  int64_t clusters = rows;
  if (clustered) {
    VP_REQUIRE(static_cast<int64_t>(options.cluster_of_row.size()) == rows,
               "bootstrap: ", options.cluster_of_row.size(), " cluster ids for ", rows, " rows");
    clusters = count_clusters(options.cluster_of_row);
  }
  BootstrapDistribution dist;
  dist.roc_auc.assign(static_cast<size_t>(options.resamples), std::vector<std::optional<double>>(labels));
  dist.average_precision = dist.roc_auc;
#pragma omp parallel
  {
    std::vector<uint32_t> counts;
#pragma omp for schedule(dynamic, 4)
    for (int64_t b = 0; b < options.resamples; ++b) {
      counts = clustered ? cluster_bootstrap_counts(options.cluster_of_row, clusters, options.seed, b)
                         : bootstrap_counts(rows, options.seed, b);
      for (size_t label = 0; label < labels; ++label) {
        RankStats stats = rank_stats<true>(sorted[label], counts.data());
        dist.roc_auc[static_cast<size_t>(b)][label] = stats.roc_auc;
        dist.average_precision[static_cast<size_t>(b)][label] = stats.average_precision;
      }
    }
  }
  return dist;
}

std::optional<double> mean_of_defined(const std::vector<std::optional<double>>& values, int64_t* defined) {
  double sum = 0.0;
  int64_t count = 0;
  for (const auto& v : values) {
    if (v) {
      sum += *v;
      ++count;
    }
  }
  if (defined) *defined = count;
  if (count == 0) return std::nullopt;
  return sum / static_cast<double>(count);
}

std::optional<ConfidenceInterval> interval(const std::vector<double>& values, size_t total,
                                           const BootstrapOptions& options) {
  if (values.empty()) return std::nullopt;
  const double confidence = options.confidence;
  ConfidenceInterval ci;
  // In percent first, so that 0.95 gives exactly 2.5 and 97.5 as one would write them for numpy.
  const double percent = 100.0 * confidence;
  ci.low = percentile(values, (100.0 - percent) / 2.0);
  ci.high = percentile(values, (100.0 + percent) / 2.0);
  ci.resamples = static_cast<int64_t>(values.size());
  ci.skipped = static_cast<int64_t>(total - values.size());
  ci.unit = options.unit;
  return ci;
}

void add_intervals(LabelMetrics& metric, const std::vector<std::vector<std::optional<double>>>& dist,
                   const BootstrapOptions& options) {
  const size_t labels = metric.per_label.size();
  metric.per_label_ci.assign(labels, std::nullopt);
  for (size_t label = 0; label < labels; ++label) {
    if (!metric.per_label[label]) continue;
    std::vector<double> values;
    for (const auto& resample : dist) {
      if (resample[label]) values.push_back(*resample[label]);
    }
    metric.per_label_ci[label] = interval(values, dist.size(), options);
  }
  if (!metric.mean) return;
  std::vector<double> means;
  for (const auto& resample : dist) {
    double sum = 0.0;
    bool complete = true;
    for (size_t label = 0; label < labels && complete; ++label) {
      if (!metric.per_label[label]) continue;
      if (resample[label]) {
        sum += *resample[label];
      } else {
        complete = false;
      }
    }
    if (complete) means.push_back(sum / static_cast<double>(metric.defined_labels));
  }
  metric.mean_ci = interval(means, dist.size(), options);
}

nlohmann::json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

nlohmann::json interval_json(const std::optional<ConfidenceInterval>& ci) {
  if (!ci) return nullptr;
  return {
      {"low", ci->low}, {"high", ci->high}, {"resamples", ci->resamples}, {"skipped", ci->skipped}, {"unit", ci->unit}};
}

}  // namespace

std::optional<double> roc_auc(std::span<const float> scores, std::span<const float> targets) {
  check_inputs(scores, targets, 1);
  return rank_stats<false>(sort_label(scores, targets, 1, 0), nullptr).roc_auc;
}

std::optional<double> average_precision(std::span<const float> scores, std::span<const float> targets) {
  check_inputs(scores, targets, 1);
  return rank_stats<false>(sort_label(scores, targets, 1, 0), nullptr).average_precision;
}

BootstrapDistribution bootstrap_distribution(std::span<const float> scores, std::span<const float> targets,
                                             int64_t num_labels, const BootstrapOptions& options,
                                             std::span<const float> weights) {
  check_inputs(scores, targets, num_labels, weights);
  const int64_t rows = static_cast<int64_t>(scores.size()) / num_labels;
  return resample(sort_all(scores, targets, num_labels, weights), rows, options);
}

EvaluationMetrics evaluate_multilabel(std::span<const float> scores, std::span<const float> targets, int64_t num_labels,
                                      const std::optional<BootstrapOptions>& bootstrap,
                                      std::span<const float> weights) {
  check_inputs(scores, targets, num_labels, weights);
  EvaluationMetrics out;
  out.rows = static_cast<int64_t>(scores.size()) / num_labels;
  out.num_labels = num_labels;
  const std::vector<SortedLabel> sorted = sort_all(scores, targets, num_labels, weights);
  for (const SortedLabel& label : sorted) {
    RankStats stats = rank_stats<false>(label, nullptr);
    out.positives.push_back(label.positives);
    out.known.push_back(label.positives + label.negatives);
    out.roc_auc.per_label.push_back(stats.roc_auc);
    out.average_precision.per_label.push_back(stats.average_precision);
  }
  out.roc_auc.mean = mean_of_defined(out.roc_auc.per_label, &out.roc_auc.defined_labels);
  out.average_precision.mean = mean_of_defined(out.average_precision.per_label, &out.average_precision.defined_labels);
  if (bootstrap) {
    BootstrapDistribution dist = resample(sorted, out.rows, *bootstrap);
    add_intervals(out.roc_auc, dist.roc_auc, *bootstrap);
    add_intervals(out.average_precision, dist.average_precision, *bootstrap);
  }
  return out;
}

nlohmann::json metrics_to_json(const EvaluationMetrics& metrics, const std::vector<std::string>& label_names) {
  VP_REQUIRE(label_names.empty() || static_cast<int64_t>(label_names.size()) == metrics.num_labels,
             "metrics: ", label_names.size(), " label names for ", metrics.num_labels, " labels");
  auto metric_json = [&](const LabelMetrics& metric) {
    nlohmann::json per_label = nlohmann::json::object();
    for (size_t label = 0; label < metric.per_label.size(); ++label) {
      nlohmann::json entry = {{"value", optional_json(metric.per_label[label])},
                              {"positives", metrics.positives[label]}};
      if (!metrics.known.empty()) {
        entry["known"] = metrics.known[label];
        entry["masked"] = metrics.rows - metrics.known[label];
      }
      if (!metric.per_label_ci.empty()) entry["ci"] = interval_json(metric.per_label_ci[label]);
      per_label[label_names.empty() ? std::to_string(label) : label_names[label]] = std::move(entry);
    }
    nlohmann::json out = {{"mean", optional_json(metric.mean)},
                          {"defined_labels", metric.defined_labels},
                          {"per_label", std::move(per_label)}};
    if (!metric.per_label_ci.empty()) out["mean_ci"] = interval_json(metric.mean_ci);
    return out;
  };
  return {{"rows", metrics.rows},
          {"num_labels", metrics.num_labels},
          {"roc_auc", metric_json(metrics.roc_auc)},
          {"average_precision", metric_json(metrics.average_precision)}};
}

}  // namespace vitpipe
