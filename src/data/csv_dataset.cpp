// csv:FILE: a column of image paths (relative to the CSV's folder, or absolute) and labels given either as one
// '|'-joined column or as one column per label, read as CheXpert's are (data/label_codes.h: 1, 0, -1 uncertain,
// blank or NaN not mentioned). Optional columns: split (train, val, test, or train_val: divided into train and val by
// patient as ChestX-ray14's official list is), patient, view.
#include <algorithm>
#include <map>
#include <set>

#include "data/csv_table.h"
#include "data/file_dataset.h"
#include "data/label_codes.h"
#include "util/error.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

bool is_code(const std::string& v) { return parse_label_code(v) != LabelCode::invalid; }
bool is_blank(const std::string& v) { return parse_label_code(v) == LabelCode::blank; }

}  // namespace

std::shared_ptr<FileDataset> open_csv_dataset(const fs::path& csv_in, const DatasetOptions& options) {
  VP_REQUIRE(fs::is_regular_file(csv_in), "csv:", csv_in.string(), ": no such file");
  const fs::path csv = fs::absolute(csv_in).lexically_normal();
  const fs::path root = csv.parent_path();
  CsvTable table = read_csv(csv);

  int path_col = table.find_column({"path", "image_path", "image", "file", "filename", "file_name", "Image Index"});
  if (path_col < 0) path_col = 0;
  const int split_col = table.find_column({"split", "subset", "set"});
  const int patient_col = table.find_column({"patient", "patient_id", "Patient ID", "subject", "subject_id"});
  const int view_col = table.find_column({"view", "view_position", "View Position"});
  std::vector<int> label_cols;
  for (int c = 0; c < static_cast<int>(table.header.size()); ++c)
    if (c != path_col && c != split_col && c != patient_col && c != view_col) label_cols.push_back(c);
  VP_REQUIRE(!label_cols.empty(), csv.string(),
             " line 1: bad header: no label column (expected a path column and "
             "either one '|'-joined label column or one 0/1 column per label)");
  VP_REQUIRE(!table.rows.empty(), csv.string(), ": no rows");

  // One column of label codes (not all blank) is a per-label column; any other single column is '|'-joined names.
  auto column_of_codes = [&](int c) {
    return std::all_of(table.rows.begin(), table.rows.end(), [&](const auto& row) { return is_code(row[c]); }) &&
           !std::all_of(table.rows.begin(), table.rows.end(), [&](const auto& row) { return is_blank(row[c]); });
  };
  const bool joined = label_cols.size() == 1 && !column_of_codes(label_cols[0]);

  FileDataset::Source source;
  source.spec = "csv:" + csv.string();
  source.kind = "csv";
  source.metadata_files = {csv};
  std::map<std::string, int32_t> label_index;
  if (joined) {
    std::set<std::string> names;
    for (const auto& row : table.rows) {
      const std::string& field = row[label_cols[0]];
      size_t start = 0;
      while (start < field.size()) {
        size_t end = std::min(field.find('|', start), field.size());
        if (end > start) names.insert(field.substr(start, end - start));
        start = end + 1;
      }
    }
    VP_REQUIRE(!names.empty(), csv.string(), ": label column \"", table.header[label_cols[0]],
               "\" is empty in every row");
    for (const auto& name : names) {
      label_index[name] = static_cast<int32_t>(source.label_names.size());
      source.label_names.push_back(name);
    }
  } else {
    for (int c : label_cols) {
      for (size_t r = 0; r < table.rows.size(); ++r)
        VP_REQUIRE(is_code(table.rows[r][c]), table.where(r), ": column \"", table.header[c], "\" holds \"",
                   table.rows[r][c], "\"; with one column per label every value must be ", kLabelCodesExpected,
                   " (name the path column \"path\" and any split / patient / view column so they are not read as "
                   "labels)");
      source.label_names.push_back(table.header[c]);
    }
  }

  bool every_row_one_label = true;
  for (size_t r = 0; r < table.rows.size(); ++r) {
    const auto& row = table.rows[r];
    SourceEntry entry;
    entry.item.name = row[path_col];
    VP_REQUIRE(!entry.item.name.empty(), table.where(r), ": empty image path");
    if (joined) {
      const std::string& field = row[label_cols[0]];
      size_t start = 0;
      while (start < field.size()) {
        size_t end = std::min(field.find('|', start), field.size());
        if (end > start) entry.item.labels.push_back(label_index.at(field.substr(start, end - start)));
        start = end + 1;
      }
    } else {
      for (size_t k = 0; k < label_cols.size(); ++k)
        add_label_code(parse_label_code(row[label_cols[k]]), static_cast<int32_t>(k), entry.item);
    }
    std::sort(entry.item.labels.begin(), entry.item.labels.end());
    entry.item.labels.erase(std::unique(entry.item.labels.begin(), entry.item.labels.end()), entry.item.labels.end());
    if (entry.item.labels.size() != 1) every_row_one_label = false;
    if (patient_col >= 0) entry.item.patient = row[patient_col];
    if (view_col >= 0) entry.item.view = row[view_col];
    entry.source_split = SourceSplit::train_val;
    const bool pool = split_col >= 0 && (row[split_col] == "train_val" || row[split_col] == "trainval");
    if (split_col >= 0 && !pool) {  // train_val: the pool divided into train and val by patient (--val-fraction)
      switch (parse_split(row[split_col], table.where(r))) {
        case Split::train:
          entry.source_split = SourceSplit::train;
          break;
        case Split::val:
          entry.source_split = SourceSplit::val;
          break;
        case Split::test:
          entry.source_split = SourceSplit::test;
          break;
        case Split::none:
          break;
      }
    }
    fs::path path = fs::path(entry.item.name).is_absolute() ? fs::path(entry.item.name) : root / entry.item.name;
    if (fs::is_regular_file(path)) {
      source.entries.push_back(std::move(entry));
      source.paths.push_back(path);
    } else {
      source.missing.push_back(std::move(entry));
    }
  }
  // A '|' column where every image has exactly one label is a single-label (softmax) task; 0/1 columns and
  // rows with zero or several labels make it multi-label.
  source.multi_label = !(joined && every_row_one_label);
  source.no_finding_allowed = source.multi_label;
  return std::make_shared<FileDataset>(std::move(source), options);
}

}  // namespace vitpipe
