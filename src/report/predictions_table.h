// A predictions CSV (`vitpipe eval --save-predictions`, or a run's predictions-SPLIT.csv) read back: the report's
// input for the metrics of a split, so it can be rebuilt from files for any past run.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace vitpipe {

struct PredictionsTable {
  std::string source;
  std::vector<std::string> labels;
  std::vector<std::string> images, patients;
  // Per row where the file has the columns (view, sex, age; else empty): the subgroups. Age -1 where blank.
  std::vector<std::string> views, sexes;
  std::vector<double> ages;
  // The `subgroup:<column>` columns (a csv's --subgroup columns): per column its name and each row's value.
  std::vector<std::pair<std::string, std::vector<std::string>>> subgroup_columns;
  // [rows, labels] row-major: targets 0/1; weights 1 known / 0 unknown (a blank true: cell); scores as ranked
  // (the logits when the file has them, else the probabilities); probabilities.
  std::vector<float> targets, weights;
  std::vector<double> scores, probabilities;
  bool has_unknown = false;
  size_t rows() const { return images.size(); }
};

// Needs columns image, patient, true:<label> and probability:<label> for each label (logit:<label> optional, all
// or none; view, sex, age and subgroup:<column> optional); one clear error naming the file and the missing or malformed
// column otherwise.
PredictionsTable read_predictions_csv(const std::filesystem::path& path);

}  // namespace vitpipe
