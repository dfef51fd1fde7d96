#include "data/data_spec.h"

#include "data/file_dataset.h"
#include "data/packed_cache.h"
#include "util/error.h"

namespace vitpipe {

namespace fs = std::filesystem;

DataSpec parse_data_spec(const std::string& text) {
  VP_REQUIRE(!text.empty(), "--data is empty (expected chestxray14:ROOT, csv:FILE, folder:ROOT or cache:DIR)");
  size_t colon = text.find(':');
  if (colon != std::string::npos) {
    std::string kind = text.substr(0, colon);
    std::string path = text.substr(colon + 1);
    if (kind == "chestxray14" || kind == "csv" || kind == "folder" || kind == "cache") {
      VP_REQUIRE(!path.empty(), "--data ", text, ": no path after \"", kind, ":\"");
      return {kind, path};
    }
    bool looks_like_kind = !kind.empty() && kind.find('/') == std::string::npos && !fs::exists(text);
    VP_REQUIRE(!looks_like_kind, "--data ", text, ": unknown dataset kind \"", kind,
               "\" (expected chestxray14:ROOT, csv:FILE, folder:ROOT or cache:DIR)");
  }
  // A bare path: recognised by what it holds.
  fs::path path = text;
  VP_REQUIRE(fs::exists(path), "--data ", text, ": no such file or directory");
  if (fs::is_regular_file(path)) return {"csv", path};
  if (fs::exists(path / kPackedCacheManifestName)) return {"cache", path};
  for (const char* name :
       {"Data_Entry_2017_v2020.csv", "Data_Entry_2017.csv", "Data_Entry_2017_v2020.csv.gz", "Data_Entry_2017.csv.gz"})
    if (fs::exists(path / name)) return {"chestxray14", path};
  return {"folder", path};
}

std::shared_ptr<Dataset> open_dataset(const std::string& spec, const DatasetOptions& options) {
  DataSpec parsed = parse_data_spec(spec);
  if (parsed.kind == "chestxray14") return open_chestxray14_dataset(parsed.path, options);
  if (parsed.kind == "csv") return open_csv_dataset(parsed.path, options);
  if (parsed.kind == "folder") return open_folder_dataset(parsed.path, options);
  return open_packed_cache(parsed.path, options);
}

}  // namespace vitpipe
