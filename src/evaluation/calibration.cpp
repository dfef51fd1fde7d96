#include "evaluation/calibration.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace vitpipe {

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
