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

// Reliability diagram: `bins` equal-width bins of the predicted probability over [0, 1] (the last one closed).
struct CalibrationBin {
  double low = 0, high = 0;
  int64_t count = 0;
  double mean_probability = 0, fraction_positive = 0;  // 0 when the bin is empty
};
struct Calibration {
  std::vector<CalibrationBin> bins;
  int64_t count = 0;
  double expected_calibration_error = 0;  // sum over bins of count/total * |fraction_positive - mean_probability|
};
// Probabilities and 0/1 targets of the known entries (weights as rank_label's).
Calibration calibration(std::span<const double> probabilities, std::span<const float> targets,
                        std::span<const float> weights, int bins = 10);

}  // namespace vitpipe
