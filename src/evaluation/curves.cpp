#include "evaluation/curves.h"

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

}  // namespace vitpipe
