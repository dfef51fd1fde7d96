// `eval --save-predictions FILE.csv`: one line per evaluated image, for the report and for users' own tools.
// Columns: image, patient, view, sex, age, `subgroup:<column>` for each csv column named by --subgroup, then per label
// `true:<label>` (0/1, blank where the label is unknown), and `logit:<label>` (multi-label) and `probability:<label>`.
// Every value is written with 17 significant digits, so a reader parses exactly the float logits vitpipe ranked (and
// the probabilities it computed from them in double).
#pragma once

#include <filesystem>

#include "data/dataset.h"
#include "train/evaluation.h"

namespace vitpipe {

// Written atomically (temporary file + rename).
// `subgroup_columns`: the dataset's DatasetOptions::subgroup_columns (each item's subgroup_values, in that order).
void write_predictions_csv(const std::filesystem::path& path, const EvaluationReport& report, const Dataset& dataset,
                           const std::vector<std::string>& subgroup_columns = {});

}  // namespace vitpipe
