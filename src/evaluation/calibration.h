// Calibration of predicted probabilities against 0/1 targets, as the report's reliability plot shows it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace vitpipe {

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
