// --data SPEC: "chestxray14:ROOT", "chexpert:ROOT", "mimic-cxr-jpg:ROOT", "padchest:ROOT", "vindr-cxr:ROOT",
// "csv:FILE", "folder:ROOT", "cache:DIR" (a bare path is recognised by its contents). open_dataset() is the one
// factory the trainer, `predict`, `eval` and `data` commands call.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "data/dataset.h"
#include "data/file_dataset.h"

namespace vitpipe {

struct DataSpec {
  std::string kind;  // one of the kinds above
  std::filesystem::path path;
};

DataSpec parse_data_spec(const std::string& text);

// --data as a run file (train_options.json) records it: an existing path made absolute, the kind kept as typed
// ("csv:data/x.csv" -> "csv:/home/me/data/x.csv"); anything else unchanged (open_dataset refuses it, naming it).
std::string recorded_data_spec(const std::string& text);

// Opens and checks the dataset: every listed image present (unless options say otherwise), splits assigned, labels
// mapped onto options.labels when given.
std::shared_ptr<Dataset> open_dataset(const std::string& spec, const DatasetOptions& options);

// A dataset of image files (every kind but the cache), as listed, without the --labels mapping.
std::shared_ptr<FileDataset> open_file_dataset(const DataSpec& spec, const DatasetOptions& options);

// The listing options (FileDataset::Source::listing_options) `options` gives a source of `kind`.
std::map<std::string, std::string> listing_options_for(const std::string& kind, const DatasetOptions& options);

}  // namespace vitpipe
