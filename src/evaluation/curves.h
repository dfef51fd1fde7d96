// One label's ROC and precision-recall curves, its operating points and its calibration, as the report shows them.
// Curves follow scikit-learn: roc_curve (drop_intermediate=False: a point per distinct score, from (0, 0) at an
// infinite threshold) and precision_recall_curve (reversed: from (recall 0, precision 1) at an infinite threshold, then
// a point per distinct score, highest first, ending at recall 1). A row is positive at threshold t when its score >= t.
// Scores only need to be ordered like the probabilities (logits are); thresholds come back in score units.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

namespace vitpipe {

struct CurvePoint {
  double x = 0, y = 0;  // ROC: (false positive rate, true positive rate); PR: (recall, precision)
  double threshold = std::numeric_limits<double>::infinity();
};

struct RankedLabel {
  std::vector<double> scores;  // descending
  std::vector<uint8_t> positive;
  int64_t positives = 0, negatives = 0;
};

// The known rows of one label (weight != 0, or all rows when `weights` is empty), sorted by descending score.
RankedLabel rank_label(std::span<const double> scores, std::span<const float> targets, std::span<const float> weights);

std::vector<CurvePoint> roc_curve(const RankedLabel& ranked);  // empty when one class is missing
std::vector<CurvePoint> pr_curve(const RankedLabel& ranked);   // empty without positives

}  // namespace vitpipe
