#include "train/predictions_file.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "data/csv_table.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe {
namespace {

std::string number(const char* format, double value) {
  char text[40];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

}  // namespace

void write_predictions_csv(const std::filesystem::path& path, const EvaluationReport& report, const Dataset& dataset,
                           const std::vector<std::string>& subgroup_columns) {
  const size_t labels = report.labels.size();
  VP_REQUIRE(report.scores.size() == report.items.size() * labels && report.targets.size() == report.scores.size(),
             "--save-predictions: the evaluation kept no per-image scores");
  std::string text = "image,patient,view,sex,age";  // view, sex, age: the report's subgroups (blank: not known)
  for (const auto& column : subgroup_columns) text += ',' + csv_escape("subgroup:" + column);
  auto header = [&](const char* kind) {
    for (const auto& label : report.labels) {
      text += ',';
      text += csv_escape(std::string(kind) + label);
    }
  };
  header("true:");
  if (report.scores_are_logits) header("logit:");
  header("probability:");
  text += '\n';
  for (size_t r = 0; r < report.items.size(); ++r) {
    const DatasetItem& item = dataset.item(report.items[r]);
    const std::filesystem::path file = dataset.file_path(report.items[r]);
    text += csv_escape(file.empty() ? item.name : file.string());
    text += ',';
    text += csv_escape(item.patient);
    text += ',';
    text += csv_escape(item.view);
    text += ',';
    text += csv_escape(item.sex);
    text += item.age_years >= 0 ? number(",%.6g", item.age_years) : std::string(",");
    for (size_t c = 0; c < subgroup_columns.size(); ++c) {
      text += ',';
      if (c < item.subgroup_values.size()) text += csv_escape(item.subgroup_values[c]);
    }
    const float* scores = report.scores.data() + r * labels;
    const float* targets = report.targets.data() + r * labels;
    const float* weights = report.weights.empty() ? nullptr : report.weights.data() + r * labels;
    for (size_t l = 0; l < labels; ++l) {
      text += weights && weights[l] == 0.0f ? "," : targets[l] != 0.0f ? ",1" : ",0";  // blank: not known
    }
    if (report.scores_are_logits) {
      for (size_t l = 0; l < labels; ++l) text += number(",%.17g", double{scores[l]});
      for (size_t l = 0; l < labels; ++l) text += number(",%.17g", 1.0 / (1.0 + std::exp(-double{scores[l]})));
    } else {
      for (size_t l = 0; l < labels; ++l) text += number(",%.17g", double{scores[l]});
    }
    text += '\n';
  }
  write_text_file_atomically(path, text);
}

}  // namespace vitpipe
