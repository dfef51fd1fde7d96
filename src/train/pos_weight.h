// Positive-class weights for imbalanced findings, as torch.nn.BCEWithLogitsLoss's pos_weight: per label,
// negatives / positives in the training targets, clamped (a label with no positive gets the maximum).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace vitpipe {

struct PosWeightOptions {
  double min_weight = 0.01;
  double max_weight = 100.0;  // ChestX-ray14's rarest finding (Hernia, ~0.2%) would otherwise get ~500
};

// Positives per label of row-major [rows, num_labels] 0/1 targets (anything else is refused).
std::vector<int64_t> count_positives(std::span<const float> targets, int64_t num_labels);

// clamp(negatives / positives, min, max) per label, negatives = rows - positives; computed in double, returned as
// the fp32 the loss uses.
std::vector<float> pos_weight_from_counts(const std::vector<int64_t>& positives, int64_t rows,
                                          const PosWeightOptions& options = {});
// The same with masked labels: negatives = known[label] - positives[label] (a label never known gets the maximum).
std::vector<float> pos_weight_from_known_counts(const std::vector<int64_t>& positives,
                                                const std::vector<int64_t>& known,
                                                const PosWeightOptions& options = {});

}  // namespace vitpipe
