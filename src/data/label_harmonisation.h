// --labels chestxray14|chexpert|union|FILE: a dataset's labels mapped onto another label set by name, so that a model
// trained on one dataset can be evaluated on another. Names match when equal after normalising (case, '_' as space)
// or when they belong to one synonym group of the built-in table (ChestX-ray14 "Effusion" = CheXpert "Pleural
// Effusion" = PadChest "pleural effusion" = VinDr-CXR "Pleural effusion"; "No Finding" = "normal"; ...). A target
// label without a match is unknown (masked) for every image; dataset labels without a target are dropped.
//
// FILE is JSON: {"labels": ["Effusion", ...], "synonyms": {"name in some dataset": "one of labels", ...}}.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace vitpipe {

struct LabelSet {
  std::vector<std::string> names;
  std::map<std::string, std::string> synonyms;  // extra: a dataset's name -> one of `names`
};

// chestxray14 (its 14 findings), chexpert (the 14 observations), union (the 21 labels of both: ChestX-ray14's
// spelling where they share one), or a JSON FILE. Throws naming the flag or file.
LabelSet named_label_set(const std::string& spec);

struct LabelMapping {
  std::vector<std::string> names;                           // the target labels
  std::vector<int32_t> source;                              // per target: the dataset label it takes, -1 none
  std::vector<std::pair<std::string, std::string>> mapped;  // (target, dataset label) pairs
  std::vector<std::string> unmapped;                        // targets no dataset label matches
  std::vector<std::string> unused;                          // dataset labels no target takes
};

// Matches `dataset_labels` to `target` (exact names first, then synonyms). Throws when two dataset labels map onto
// one target.
LabelMapping map_labels(const std::vector<std::string>& dataset_labels, const LabelSet& target);

// The mapping as JSON: {"mapped": {target: dataset label}, "unmapped": [...], "unused": [...]}.
nlohmann::json label_mapping_json(const LabelMapping& mapping);

// Applies the mapping to `dataset` (Dataset::remap_labels).
void apply_label_mapping(Dataset& dataset, const LabelMapping& mapping);

}  // namespace vitpipe
