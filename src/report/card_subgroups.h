// The model card's subgroup section: performance by sex, age band and view on one evaluated split, as the evaluation
// computes it (evaluation/subgroups.h, from the split's predictions file, on the same patient resamples as `vitpipe
// eval --bootstrap`): per subgroup its size and underdiagnosis rate, the largest gap per finding, and per finding and
// subgroup the ROC-AUC with its interval, the gap against the rest of the attribute's groups with its interval and
// TPR / FPR at the thresholds chosen on the validation split. What was not evaluated says so; no number is made up
// (an undefined rate is written "undefined", never 0).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "evaluation/subgroups.h"

namespace vitpipe {

// `analysis` of `split`'s predictions, or nullopt with `not_evaluated` saying why (without a final period).
// `resamples`: the bootstrap resamples of its intervals (0: none).
std::string card_subgroup_section(const std::string& split, const std::optional<SubgroupAnalysis>& analysis,
                                  const std::string& not_evaluated, int64_t resamples);

}  // namespace vitpipe
