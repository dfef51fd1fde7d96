// --data SPEC: "chestxray14:ROOT", "csv:FILE", "folder:ROOT", "cache:DIR" (a bare path is recognised by its
// contents). open_dataset() is the one factory the trainer, `predict`, `eval` and `data` commands call.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "data/dataset.h"

namespace vitpipe {

struct DataSpec {
  std::string kind;  // "chestxray14", "csv", "folder", "cache"
  std::filesystem::path path;
};

DataSpec parse_data_spec(const std::string& text);

// Opens and checks the dataset: every listed image present (unless options say otherwise), splits assigned.
std::shared_ptr<Dataset> open_dataset(const std::string& spec, const DatasetOptions& options);

}  // namespace vitpipe
