// What `vitpipe data inspect` prints: counts per split, per label, per view, patients per split, missing files.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "data/dataset.h"

namespace vitpipe {

// {"spec", "kind", "total", "missing", "splits": {train, val, test[, none]}, "label_counts": {label: images},
//  "labels", "multi_label", "patients": {train, val, test}, "patients_in_two_splits", "views": {view: images},
//  "missing_examples"}. label_counts also counts "No Finding" (no label) for multi-label data.
nlohmann::json summarize_dataset(const Dataset& dataset);

// The same as a readable table.
std::string format_dataset_summary(const nlohmann::json& summary);

}  // namespace vitpipe
