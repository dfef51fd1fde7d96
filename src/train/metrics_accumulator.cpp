#include "train/metrics_accumulator.h"

#include <cmath>

#include "util/error.h"

namespace vitpipe {

ScoreAccumulator::ScoreAccumulator(int64_t num_labels) : num_labels_(num_labels) {
  VP_REQUIRE(num_labels > 0, "score accumulator: the number of labels must be positive (got ", num_labels, ")");
}

void ScoreAccumulator::add(std::span<const float> scores, std::span<const float> targets) {
  VP_REQUIRE(scores.size() == targets.size(), "score accumulator: ", scores.size(), " scores but ", targets.size(),
             " targets");
  VP_REQUIRE(scores.size() % static_cast<size_t>(num_labels_) == 0, "score accumulator: ", scores.size(),
             " values do not form rows of ", num_labels_, " labels");
  for (size_t i = 0; i < scores.size(); ++i) {
    VP_REQUIRE(!std::isnan(scores[i]), "score accumulator: score ", i, " of the batch is NaN");
    VP_REQUIRE(targets[i] == 0.0f || targets[i] == 1.0f, "score accumulator: target ", i, " of the batch is ",
               targets[i], ", expected 0 or 1");
  }
  scores_.insert(scores_.end(), scores.begin(), scores.end());
  targets_.insert(targets_.end(), targets.begin(), targets.end());
}

void ScoreAccumulator::add(const Tensor& scores, const Tensor& targets) {
  VP_REQUIRE(scores.rank() == 2 && scores.dim(1) == num_labels_, "score accumulator: scores of shape ",
             shape_string(scores.shape()), ", expected [rows, ", num_labels_, "]");
  VP_REQUIRE(targets.shape() == scores.shape(), "score accumulator: targets of shape ", shape_string(targets.shape()),
             " for scores of shape ", shape_string(scores.shape()));
  const size_t n = static_cast<size_t>(scores.numel());
  add(std::span<const float>(scores.f32(), n), std::span<const float>(targets.f32(), n));
}

void ScoreAccumulator::reserve(int64_t rows) {
  scores_.reserve(static_cast<size_t>(rows * num_labels_));
  targets_.reserve(static_cast<size_t>(rows * num_labels_));
}

void ScoreAccumulator::clear() {
  scores_.clear();
  targets_.clear();
}

EvaluationMetrics ScoreAccumulator::evaluate(const std::optional<BootstrapOptions>& bootstrap) const {
  return evaluate_multilabel(scores_, targets_, num_labels_, bootstrap);
}

}  // namespace vitpipe
