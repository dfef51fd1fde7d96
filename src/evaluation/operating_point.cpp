#include "evaluation/operating_point.h"

#include <vector>

namespace vitpipe {

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

}  // namespace vitpipe
