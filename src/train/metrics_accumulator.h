// Collects a whole evaluation's scores and targets batch by batch, so the ranking metrics (which need every row at
// once) can be computed at the end. The raw arrays are exposed so a distributed run can gather them onto one
// process (e.g. MPI_Gatherv of scores() and targets()) and append them there with add().
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "evaluation/ranking_metrics.h"
#include "tensor/tensor.h"

namespace vitpipe {

class ScoreAccumulator {
 public:
  explicit ScoreAccumulator(int64_t num_labels);

  // Appends rows: row-major [rows, num_labels] scores and 0/1 targets (checked here, so a bad batch fails where it
  // comes from).
  void add(std::span<const float> scores, std::span<const float> targets);
  void add(const Tensor& scores, const Tensor& targets);  // f32 [rows, num_labels] each
  void reserve(int64_t rows);
  void clear();

  int64_t num_labels() const { return num_labels_; }
  int64_t rows() const { return static_cast<int64_t>(scores_.size()) / num_labels_; }
  const std::vector<float>& scores() const { return scores_; }
  const std::vector<float>& targets() const { return targets_; }

  EvaluationMetrics evaluate(const std::optional<BootstrapOptions>& bootstrap = {}) const;

 private:
  int64_t num_labels_;
  std::vector<float> scores_;
  std::vector<float> targets_;
};

}  // namespace vitpipe
