// One label's confusion counts at a threshold, and the two thresholds the report names: Youden's and the highest
// reaching a sensitivity. A row is positive at threshold t when its score >= t (scores ranked as in curves.h).
#pragma once

#include <cstdint>
#include <optional>

#include "evaluation/curves.h"

namespace vitpipe {

struct OperatingPoint {
  double threshold = 0;
  int64_t tp = 0, fp = 0, tn = 0, fn = 0;
  double sensitivity() const { return tp + fn > 0 ? static_cast<double>(tp) / static_cast<double>(tp + fn) : 0; }
  double specificity() const { return tn + fp > 0 ? static_cast<double>(tn) / static_cast<double>(tn + fp) : 0; }
  std::optional<double> ppv() const {
    return tp + fp > 0 ? std::optional<double>(static_cast<double>(tp) / static_cast<double>(tp + fp)) : std::nullopt;
  }
  std::optional<double> npv() const {
    return tn + fn > 0 ? std::optional<double>(static_cast<double>(tn) / static_cast<double>(tn + fn)) : std::nullopt;
  }
};

OperatingPoint operating_point(const RankedLabel& ranked, double threshold);
// The threshold maximising Youden's J = sensitivity + specificity - 1 (the highest such threshold on ties).
std::optional<OperatingPoint> youden_point(const RankedLabel& ranked);
// The highest threshold whose sensitivity reaches `sensitivity`.
std::optional<OperatingPoint> point_at_sensitivity(const RankedLabel& ranked, double sensitivity);

}  // namespace vitpipe
