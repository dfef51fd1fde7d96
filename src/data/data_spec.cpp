#include "data/data_spec.h"

#include "data/file_dataset.h"
#include "data/label_harmonisation.h"
#include "data/packed_cache.h"
#include "util/error.h"
#include "util/log.h"
#include "util/recorded_path.h"

namespace vitpipe {

namespace fs = std::filesystem;

namespace {

constexpr const char* kKinds =
    "chestxray14:ROOT, chexpert:ROOT, mimic-cxr-jpg:ROOT, padchest:ROOT, vindr-cxr:ROOT, csv:FILE, folder:ROOT or "
    "cache:DIR";

bool known_kind(const std::string& kind) {
  for (const char* k : {"chestxray14", "chexpert", "mimic-cxr-jpg", "padchest", "vindr-cxr", "csv", "folder", "cache"})
    if (kind == k) return true;
  return false;
}

}  // namespace

DataSpec parse_data_spec(const std::string& text) {
  VP_REQUIRE(!text.empty(), "--data is empty (expected ", kKinds, ")");
  size_t colon = text.find(':');
  if (colon != std::string::npos) {
    std::string kind = text.substr(0, colon);
    std::string path = text.substr(colon + 1);
    if (known_kind(kind)) {
      VP_REQUIRE(!path.empty(), "--data ", text, ": no path after \"", kind, ":\"");
      return {kind, path};
    }
    bool looks_like_kind = !kind.empty() && kind.find('/') == std::string::npos && !fs::exists(text);
    VP_REQUIRE(!looks_like_kind, "--data ", text, ": unknown dataset kind \"", kind, "\" (expected ", kKinds, ")");
  }
  // A bare path: recognised by what it holds.
  fs::path path = text;
  VP_REQUIRE(fs::exists(path), "--data ", text, ": no such file or directory");
  if (fs::is_regular_file(path)) return {"csv", path};
  if (fs::exists(path / kPackedCacheManifestName)) return {"cache", path};
  for (const char* name :
       {"Data_Entry_2017_v2020.csv", "Data_Entry_2017.csv", "Data_Entry_2017_v2020.csv.gz", "Data_Entry_2017.csv.gz"})
    if (fs::exists(path / name)) return {"chestxray14", path};
  if (fs::exists(path / "train.csv") && fs::exists(path / "valid.csv")) return {"chexpert", path};
  if (fs::exists(path / "mimic-cxr-2.0.0-split.csv.gz") || fs::exists(path / "mimic-cxr-2.0.0-split.csv"))
    return {"mimic-cxr-jpg", path};
  if (fs::exists(path / "annotations" / "image_labels_train.csv")) return {"vindr-cxr", path};
  for (const auto& entry : fs::directory_iterator(path))
    if (entry.path().filename().string().rfind("PADCHEST_", 0) == 0) return {"padchest", path};
  return {"folder", path};
}

std::string recorded_data_spec(const std::string& text) {
  std::string kind, path = text;
  const size_t colon = text.find(':');
  if (colon != std::string::npos && known_kind(text.substr(0, colon))) {
    kind = text.substr(0, colon + 1);
    path = text.substr(colon + 1);
  }
  std::error_code error;
  if (path.empty() || !fs::exists(path, error)) return text;
  return kind + recorded_path(path);
}

std::shared_ptr<FileDataset> open_file_dataset(const DataSpec& spec, const DatasetOptions& options) {
  if (spec.kind == "chestxray14") return open_chestxray14_dataset(spec.path, options);
  if (spec.kind == "chexpert") return open_chexpert_dataset(spec.path, options);
  if (spec.kind == "mimic-cxr-jpg") return open_mimic_cxr_dataset(spec.path, options);
  if (spec.kind == "padchest") return open_padchest_dataset(spec.path, options);
  if (spec.kind == "vindr-cxr") return open_vindr_cxr_dataset(spec.path, options);
  if (spec.kind == "csv") return open_csv_dataset(spec.path, options);
  VP_REQUIRE(spec.kind == "folder", "--data ", spec.kind, ":", spec.path.string(), ": not a dataset of image files");
  return open_folder_dataset(spec.path, options);
}

std::map<std::string, std::string> listing_options_for(const std::string& kind, const DatasetOptions& options) {
  if (kind == "vindr-cxr") return {{"label_vote", label_vote_name(options.label_vote)}};
  if (kind == "mimic-cxr-jpg") return {{"mimic_labels", options.mimic_labels}};
  return {};
}

std::shared_ptr<Dataset> open_dataset(const std::string& spec, const DatasetOptions& options) {
  DataSpec parsed = parse_data_spec(spec);
  std::shared_ptr<Dataset> dataset;
  if (parsed.kind == "cache") {
    dataset = open_packed_cache(parsed.path, options);
  } else {
    auto files = open_file_dataset(parsed, options);
    // Archives are read front to back, once: training and evaluation read the cache `data prepare` makes of them.
    VP_REQUIRE(files->source().archives.empty() || options.allow_missing, "--data ", spec, ": the images are in ",
               files->source().archives.size(),
               " .tar.gz archives, which are not read image by image; run `vitpipe data prepare --data ", files->spec(),
               " --out CACHE` once, then use --data cache:CACHE");
    dataset = files;
  }
  if (!options.labels.empty()) {
    const LabelMapping mapping = map_labels(dataset->label_names(), named_label_set(options.labels));
    VP_REQUIRE(!mapping.mapped.empty(), dataset->spec(), ": --labels ", options.labels,
               ": none of its labels matches a label of this dataset");
    apply_label_mapping(*dataset, mapping);
    std::string mapped, unmapped;
    for (const auto& [target, source] : mapping.mapped)
      mapped += (mapped.empty() ? "" : ", ") + (target == source ? target : target + " <- " + source);
    for (const auto& name : mapping.unmapped) unmapped += (unmapped.empty() ? "" : ", ") + name;
    info(dataset->spec(), ": --labels ", options.labels, ": ", mapping.mapped.size(), " of ", mapping.names.size(),
         " labels mapped (", mapped, ")", unmapped.empty() ? "" : "; unknown here, so masked: " + unmapped,
         mapping.unused.empty() ? "" : concat("; ", mapping.unused.size(), " dataset label(s) dropped"));
  }
  return dataset;
}

}  // namespace vitpipe
