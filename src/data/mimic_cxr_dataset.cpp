// mimic-cxr-jpg:ROOT (MIMIC-CXR-JPG 2.0.0 on PhysioNet): ROOT/mimic-cxr-2.0.0-split.csv.gz (dicom_id, study_id,
// subject_id, split = train / validate / test: the official splits), the label file of --mimic-labels
// (mimic-cxr-2.0.0-chexpert.csv.gz or mimic-cxr-2.0.0-negbio.csv.gz: subject_id, study_id and the 14 CheXpert
// observations coded 1.0 / 0.0 / -1.0 / blank, one row per study), ROOT/mimic-cxr-2.0.0-metadata.csv.gz (ViewPosition
// per dicom_id, optional), images at ROOT/files/p10/p10000032/s50414267/<dicom_id>.jpg. A study's images share its
// labels; the patient is the subject. Images of a study without a label row are left out (and counted).
#include <map>
#include <unordered_map>

#include "data/chexpert_observations.h"
#include "data/csv_table.h"
#include "data/file_dataset.h"
#include "data/label_codes.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

fs::path find_file(const fs::path& root, const std::string& stem) {
  for (const char* suffix : {".csv.gz", ".csv"}) {
    const fs::path p = root / (stem + suffix);
    if (fs::is_regular_file(p)) return p;
  }
  return {};
}

int required_column(const CsvTable& table, const std::string& name) {
  const int c = table.column(name);
  VP_REQUIRE(c >= 0, table.source, " line 1: no \"", name, "\" column");
  return c;
}

}  // namespace

std::shared_ptr<FileDataset> open_mimic_cxr_dataset(const fs::path& root_in, const DatasetOptions& options) {
  VP_REQUIRE(fs::is_directory(root_in), "mimic-cxr-jpg:", root_in.string(), ": not a directory");
  const fs::path root = fs::absolute(root_in).lexically_normal();
  VP_REQUIRE(options.mimic_labels == "chexpert" || options.mimic_labels == "negbio", "--mimic-labels ",
             options.mimic_labels, ": expected chexpert or negbio");
  const fs::path split_csv = find_file(root, "mimic-cxr-2.0.0-split");
  const fs::path label_csv = find_file(root, "mimic-cxr-2.0.0-" + options.mimic_labels);
  const fs::path metadata_csv = find_file(root, "mimic-cxr-2.0.0-metadata");
  VP_REQUIRE(!split_csv.empty(), root.string(), ": no mimic-cxr-2.0.0-split.csv.gz (MIMIC-CXR-JPG's official split)");
  VP_REQUIRE(!label_csv.empty(), root.string(), ": no mimic-cxr-2.0.0-", options.mimic_labels,
             ".csv.gz (the labels --mimic-labels ", options.mimic_labels, " asks for)");

  FileDataset::Source source;
  source.spec = "mimic-cxr-jpg:" + root.string();
  source.kind = "mimic-cxr-jpg";
  source.label_names = chexpert_observations();
  source.multi_label = true;
  source.metadata_files = {split_csv, label_csv};
  if (!metadata_csv.empty()) source.metadata_files.push_back(metadata_csv);
  source.listing_options["mimic_labels"] = options.mimic_labels;

  // Labels per study.
  std::map<std::string, DatasetItem> study_labels;  // "subject/study" -> labels
  {
    const CsvTable table = read_csv(label_csv);
    const int subject_col = required_column(table, "subject_id"), study_col = required_column(table, "study_id");
    std::vector<int> label_cols;
    for (const auto& label : source.label_names) label_cols.push_back(required_column(table, label));
    for (size_t r = 0; r < table.rows.size(); ++r) {
      const auto& row = table.rows[r];
      DatasetItem labels;
      for (size_t k = 0; k < label_cols.size(); ++k) {
        const std::string& cell = row[label_cols[k]];
        const LabelCode code = parse_label_code(cell);
        VP_REQUIRE(code != LabelCode::invalid, table.where(r), ": column \"", source.label_names[k], "\" holds \"",
                   cell, "\" (expected ", kLabelCodesExpected, ")");
        add_label_code(code, static_cast<int32_t>(k), labels);
      }
      const std::string key = row[subject_col] + "/" + row[study_col];
      VP_REQUIRE(study_labels.emplace(key, std::move(labels)).second, table.where(r), ": study ", row[study_col],
                 " of subject ", row[subject_col], " is listed twice");
    }
  }
  std::unordered_map<std::string, std::string> view_of;  // dicom_id -> ViewPosition
  if (!metadata_csv.empty()) {
    const CsvTable table = read_csv(metadata_csv);
    const int id_col = required_column(table, "dicom_id"), view_col = required_column(table, "ViewPosition");
    for (const auto& row : table.rows) view_of[row[id_col]] = row[view_col];
  }

  const CsvTable table = read_csv(split_csv);
  const int id_col = required_column(table, "dicom_id"), study_col = required_column(table, "study_id"),
            subject_col = required_column(table, "subject_id"), split_col = required_column(table, "split");
  int64_t unlabelled = 0;
  for (size_t r = 0; r < table.rows.size(); ++r) {
    const auto& row = table.rows[r];
    const std::string& subject = row[subject_col];
    const std::string& study = row[study_col];
    VP_REQUIRE(subject.size() >= 2, table.where(r), ": subject_id \"", subject, "\" is too short");
    SourceEntry entry;
    const std::string& split = row[split_col];
    if (split == "train") {
      entry.source_split = SourceSplit::train;
    } else if (split == "validate") {
      entry.source_split = SourceSplit::val;
    } else if (split == "test") {
      entry.source_split = SourceSplit::test;
    } else {
      fail(table.where(r), ": column \"split\" holds \"", split, "\" (expected train, validate or test)");
    }
    const auto labels = study_labels.find(subject + "/" + study);
    if (labels == study_labels.end()) {
      ++unlabelled;
      continue;
    }
    entry.item = labels->second;
    entry.item.name = "files/p" + subject.substr(0, 2) + "/p" + subject + "/s" + study + "/" + row[id_col] + ".jpg";
    entry.item.patient = subject;
    const auto view = view_of.find(row[id_col]);
    if (view != view_of.end()) entry.item.view = view->second;
    const fs::path path = root / entry.item.name;
    if (fs::is_regular_file(path)) {
      source.entries.push_back(std::move(entry));
      source.paths.push_back(path);
    } else {
      source.missing.push_back(std::move(entry));
    }
  }
  if (unlabelled > 0)
    info(source.spec, ": ", unlabelled, " images of studies without a row in ", label_csv.filename().string(),
         " are left out");
  return std::make_shared<FileDataset>(std::move(source), options);
}

}  // namespace vitpipe
