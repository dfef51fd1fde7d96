#include "train/curves.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace vitpipe {

RankedLabel rank_label(std::span<const double> scores, std::span<const float> targets, std::span<const float> weights) {
  VP_REQUIRE(scores.size() == targets.size() && (weights.empty() || weights.size() == scores.size()),
             "curves: scores, targets and weights differ in length");
  std::vector<size_t> order;
  order.reserve(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    if (!weights.empty() && weights[i] == 0.0f) continue;
    VP_REQUIRE(!std::isnan(scores[i]), "curves: a score is NaN");
    VP_REQUIRE(targets[i] == 0.0f || targets[i] == 1.0f, "curves: a target is ", targets[i], ", expected 0 or 1");
    order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  RankedLabel r;
  r.scores.reserve(order.size());
  r.positive.reserve(order.size());
  for (size_t i : order) {
    r.scores.push_back(scores[i]);
    r.positive.push_back(targets[i] == 1.0f ? 1 : 0);
    (targets[i] == 1.0f ? r.positives : r.negatives) += 1;
  }
  return r;
}

namespace {

// Calls visit(threshold, tp, fp) after each run of tied scores, highest score first.
template <class Visit>
void for_each_threshold(const RankedLabel& r, Visit visit) {
  int64_t tp = 0, fp = 0;
  for (size_t i = 0; i < r.scores.size(); ++i) {
    (r.positive[i] ? tp : fp) += 1;
    if (i + 1 == r.scores.size() || r.scores[i + 1] != r.scores[i]) visit(r.scores[i], tp, fp);
  }
}

}  // namespace

std::vector<CurvePoint> roc_curve(const RankedLabel& r) {
  if (r.positives == 0 || r.negatives == 0) return {};
  std::vector<CurvePoint> points{{0.0, 0.0, std::numeric_limits<double>::infinity()}};
  const double p = static_cast<double>(r.positives), n = static_cast<double>(r.negatives);
  for_each_threshold(r, [&](double threshold, int64_t tp, int64_t fp) {
    points.push_back({static_cast<double>(fp) / n, static_cast<double>(tp) / p, threshold});
  });
  return points;
}

std::vector<CurvePoint> pr_curve(const RankedLabel& r) {
  if (r.positives == 0) return {};
  // scikit-learn ends its arrays (lowest threshold first) with (recall 0, precision 1); in this order, highest
  // threshold first, that point comes first (put last, it drew a false line from recall 1 back to (0, 1)).
  std::vector<CurvePoint> points{{0.0, 1.0, std::numeric_limits<double>::infinity()}};
  const double p = static_cast<double>(r.positives);
  for_each_threshold(r, [&](double threshold, int64_t tp, int64_t fp) {
    points.push_back({static_cast<double>(tp) / p, static_cast<double>(tp) / static_cast<double>(tp + fp), threshold});
  });
  return points;
}

OperatingPoint operating_point(const RankedLabel& r, double threshold) {
  OperatingPoint op;
  op.threshold = threshold;
  for (size_t i = 0; i < r.scores.size(); ++i) {
    const bool predicted = r.scores[i] >= threshold;
    if (r.positive[i]) {
      (predicted ? op.tp : op.fn) += 1;
    } else {
      (predicted ? op.fp : op.tn) += 1;
    }
  }
  return op;
}

std::optional<OperatingPoint> youden_point(const RankedLabel& r) {
  const std::vector<CurvePoint> roc = roc_curve(r);
  if (roc.empty()) return std::nullopt;
  size_t best = 1;  // the first finite threshold
  for (size_t i = 1; i < roc.size(); ++i) {
    if (roc[i].y - roc[i].x > roc[best].y - roc[best].x) best = i;
  }
  return operating_point(r, roc[best].threshold);
}

std::optional<OperatingPoint> point_at_sensitivity(const RankedLabel& r, double sensitivity) {
  const std::vector<CurvePoint> roc = roc_curve(r);
  for (size_t i = 1; i < roc.size(); ++i) {
    if (roc[i].y >= sensitivity) return operating_point(r, roc[i].threshold);
  }
  return std::nullopt;
}

Calibration calibration(std::span<const double> probabilities, std::span<const float> targets,
                        std::span<const float> weights, int bins) {
  VP_REQUIRE(
      probabilities.size() == targets.size() && (weights.empty() || weights.size() == targets.size()) && bins > 0,
      "calibration: probabilities, targets and weights differ in length");
  Calibration c;
  c.bins.resize(static_cast<size_t>(bins));
  std::vector<double> sum_p(static_cast<size_t>(bins), 0.0), sum_y(static_cast<size_t>(bins), 0.0);
  for (size_t i = 0; i < probabilities.size(); ++i) {
    if (!weights.empty() && weights[i] == 0.0f) continue;
    const double p = probabilities[i];
    VP_REQUIRE(p >= 0.0 && p <= 1.0, "calibration: a probability is ", p, ", expected 0..1");
    const auto b = std::min(static_cast<size_t>(p * bins), static_cast<size_t>(bins - 1));
    c.bins[b].count += 1;
    sum_p[b] += p;
    sum_y[b] += targets[i];
    c.count += 1;
  }
  for (size_t b = 0; b < c.bins.size(); ++b) {
    CalibrationBin& bin = c.bins[b];
    bin.low = static_cast<double>(b) / bins;
    bin.high = static_cast<double>(b + 1) / bins;
    if (bin.count == 0) continue;
    bin.mean_probability = sum_p[b] / static_cast<double>(bin.count);
    bin.fraction_positive = sum_y[b] / static_cast<double>(bin.count);
    c.expected_calibration_error += static_cast<double>(bin.count) / static_cast<double>(c.count) *
                                    std::abs(bin.fraction_positive - bin.mean_probability);
  }
  return c;
}

}  // namespace vitpipe
