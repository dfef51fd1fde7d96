// chexpert:ROOT (CheXpert-v1.0 or CheXpert-v1.0-small): ROOT/train.csv and ROOT/valid.csv, a `Path` column relative
// to ROOT's parent ("CheXpert-v1.0-small/train/patient00001/study1/view1_frontal.jpg"), Frontal/Lateral, AP/PA and
// the 14 observations coded 1.0 / 0.0 / -1.0 (uncertain) / blank (not mentioned).
// Splits: train.csv is the train_val pool, divided by patient (patientNNNNN in the path) into train and val;
// valid.csv, the official radiologist-labelled evaluation set, is `test`.
// Views: PA / AP from the AP/PA column for frontal images, LATERAL (or LL / RL) for lateral ones.
#include <algorithm>

#include "data/chexpert_observations.h"
#include "data/csv_table.h"
#include "data/file_dataset.h"
#include "data/label_codes.h"
#include "util/error.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

std::string patient_of(const std::string& path) {
  for (const auto& part : fs::path(path))
    if (part.string().rfind("patient", 0) == 0) return part.string();
  return "";
}

// Where `Path` is relative to: ROOT's parent (as shipped), ROOT itself, or ROOT with the first component dropped
// (the folder renamed); decided by the first listed image found.
fs::path resolve(const fs::path& root, const std::string& listed, int base) {
  const fs::path p(listed);
  if (p.is_absolute()) return p;
  if (base == 0) return root.parent_path() / p;
  if (base == 1) return root / p;
  fs::path rest;
  bool first = true;
  for (const auto& part : p) {
    if (!first) rest /= part;
    first = false;
  }
  return root / rest;
}

}  // namespace

std::shared_ptr<FileDataset> open_chexpert_dataset(const fs::path& root_in, const DatasetOptions& options) {
  VP_REQUIRE(fs::is_directory(root_in), "chexpert:", root_in.string(), ": not a directory");
  const fs::path root = fs::absolute(root_in).lexically_normal();
  FileDataset::Source source;
  source.spec = "chexpert:" + root.string();
  source.kind = "chexpert";
  source.label_names = chexpert_observations();
  source.multi_label = true;
  int base = -1;
  for (const auto& [name, split] :
       {std::pair{"train.csv", SourceSplit::train_val}, std::pair{"valid.csv", SourceSplit::test}}) {
    const fs::path csv = root / name;
    VP_REQUIRE(fs::is_regular_file(csv), root.string(), ": no ", name, " (CheXpert's label file)");
    source.metadata_files.push_back(csv);
    const CsvTable table = read_csv(csv);
    const int path_col = table.column("Path");
    VP_REQUIRE(path_col >= 0, csv.string(), " line 1: no \"Path\" column");
    const int frontal_col = table.column("Frontal/Lateral"), position_col = table.column("AP/PA");
    std::vector<int> label_cols;
    for (const auto& label : source.label_names) {
      label_cols.push_back(table.column(label));
      VP_REQUIRE(label_cols.back() >= 0, csv.string(), " line 1: no \"", label,
                 "\" column (CheXpert's 14 observations)");
    }
    for (size_t r = 0; r < table.rows.size(); ++r) {
      const auto& row = table.rows[r];
      SourceEntry entry;
      entry.item.name = row[path_col];
      VP_REQUIRE(!entry.item.name.empty(), table.where(r), ": empty Path");
      entry.item.patient = patient_of(entry.item.name);
      const std::string frontal = frontal_col >= 0 ? row[frontal_col] : "";
      const std::string position = position_col >= 0 ? row[position_col] : "";
      if (frontal == "Lateral") {
        entry.item.view = (position == "LL" || position == "RL") ? position : "LATERAL";
      } else if (frontal == "Frontal") {
        entry.item.view = (position == "AP" || position == "PA") ? position : "FRONTAL";
      }
      for (size_t k = 0; k < label_cols.size(); ++k) {
        const std::string& cell = row[label_cols[k]];
        const LabelCode code = parse_label_code(cell);
        VP_REQUIRE(code != LabelCode::invalid, table.where(r), ": column \"", source.label_names[k], "\" holds \"",
                   cell, "\" (expected ", kLabelCodesExpected, ")");
        add_label_code(code, static_cast<int32_t>(k), entry.item);
      }
      entry.source_split = split;
      if (base < 0) {
        base = 0;
        for (int b = 0; b < 3; ++b)
          if (fs::is_regular_file(resolve(root, entry.item.name, b))) {
            base = b;
            break;
          }
      }
      const fs::path path = resolve(root, entry.item.name, base);
      if (fs::is_regular_file(path)) {
        source.entries.push_back(std::move(entry));
        source.paths.push_back(path);
      } else {
        source.missing.push_back(std::move(entry));
      }
    }
  }
  return std::make_shared<FileDataset>(std::move(source), options);
}

}  // namespace vitpipe
