#include "train/pos_weight.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/error.h"

namespace vitpipe {

std::vector<int64_t> count_positives(std::span<const float> targets, int64_t num_labels) {
  VP_REQUIRE(num_labels > 0, "pos_weight: the number of labels must be positive (got ", num_labels, ")");
  VP_REQUIRE(targets.size() % static_cast<size_t>(num_labels) == 0, "pos_weight: ", targets.size(),
             " targets do not form rows of ", num_labels, " labels");
  std::vector<int64_t> positives(static_cast<size_t>(num_labels), 0);
  for (size_t i = 0; i < targets.size(); ++i) {
    VP_REQUIRE(targets[i] == 0.0f || targets[i] == 1.0f, "pos_weight: target of row ", i / num_labels, ", label ",
               i % num_labels, " is ", targets[i], ", expected 0 or 1");
    positives[i % static_cast<size_t>(num_labels)] += targets[i] == 1.0f;
  }
  return positives;
}

std::vector<float> pos_weight_from_counts(const std::vector<int64_t>& positives, int64_t rows,
                                          const PosWeightOptions& options) {
  VP_REQUIRE(rows > 0, "pos_weight: no training rows to count labels in");
  return pos_weight_from_known_counts(positives, std::vector<int64_t>(positives.size(), rows), options);
}

std::vector<float> pos_weight_from_known_counts(const std::vector<int64_t>& positives,
                                                const std::vector<int64_t>& known, const PosWeightOptions& options) {
  VP_REQUIRE(options.min_weight > 0.0 && options.min_weight <= options.max_weight && std::isfinite(options.max_weight),
             "pos_weight: clamp range [", options.min_weight, ", ", options.max_weight, "] is not a positive range");
  VP_REQUIRE(known.size() == positives.size(), "pos_weight: ", known.size(), " known counts for ", positives.size(),
             " labels");
  std::vector<float> weights;
  for (size_t label = 0; label < positives.size(); ++label) {
    const int64_t pos = positives[label], rows = known[label];
    VP_REQUIRE(pos >= 0 && pos <= rows, "pos_weight: label ", label, " has ", pos, " positives in ", rows, " rows");
    const double ratio =
        pos == 0 ? std::numeric_limits<double>::infinity() : static_cast<double>(rows - pos) / static_cast<double>(pos);
    weights.push_back(static_cast<float>(std::clamp(ratio, options.min_weight, options.max_weight)));
  }
  return weights;
}

}  // namespace vitpipe
