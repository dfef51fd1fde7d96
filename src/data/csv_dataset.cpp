// csv:FILE: a column of image paths (relative to the CSV's folder, or absolute) and labels given either as one
// '|'-joined column or as one column per label, read as CheXpert's are (data/label_codes.h: 1, 0, -1 uncertain,
// blank or NaN not mentioned). Optional columns: split (train, val, test, or train_val: divided into train and val by
// patient as ChestX-ray14's official list is), patient, view.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <set>

#include "data/csv_table.h"
#include "data/file_dataset.h"
#include "data/label_codes.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

// NIH's "Finding Labels" write an image without findings as "No Finding": joined labels make it a label of its
// own, one more than a findings-only model's head has, and the head is then replaced. Said once, with the way out.
void warn_no_finding_label(const FileDataset::Source& source, const std::string& column, bool joined,
                           const DatasetOptions& options, const std::string& csv) {
  if (!joined || !source.multi_label || !options.labels.empty() || !log_enabled()) return;
  for (const auto& name : source.label_names) {
    std::string n;
    for (char c : name) n.push_back(c == '_' ? ' ' : static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    if (n != "no finding") continue;
    warn("csv:", csv, ": column \"", column, "\" names \"", name, "\", read as a label of its own (",
         source.label_names.size(), " labels), so a model with a head for the other ", source.label_names.size() - 1,
         " gets a new classifier head; to read it as no finding and keep the head, pass --labels chestxray14 (or "
         "--labels FILE.json with the labels to keep)");
    return;
  }
}

bool is_code(const std::string& v) { return parse_label_code(v) != LabelCode::invalid; }
bool is_blank(const std::string& v) { return parse_label_code(v) == LabelCode::blank; }

// A number that is not a label code ("2", "0.5", "1e3"): neither a label code nor a label name.
bool is_other_number(const std::string& v) {
  if (is_code(v)) return false;
  char* end = nullptr;
  std::strtod(v.c_str(), &end);
  return end == v.c_str() + v.size();
}

// "lines 2, 5 and 9" / "lines 2, 5, 9 and 40 more": the rows for which `pick` holds, for messages.
template <class Pick>
std::string lines_where(const CsvTable& table, Pick pick) {
  std::vector<int64_t> lines;
  size_t count = 0;
  for (size_t r = 0; r < table.rows.size(); ++r) {
    if (!pick(table.rows[r])) continue;
    if (++count <= 3) lines.push_back(table.row_lines[r]);
  }
  std::string text = count == 1 ? "line " : "lines ";
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) text += (i + 1 == lines.size() && count == lines.size()) ? " and " : ", ";
    text += std::to_string(lines[i]);
  }
  if (count > lines.size()) text += concat(" and ", count - lines.size(), " more");
  return text;
}

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
  // Without a path column the first one is taken as the paths, unless it is another known column: a CSV that lost
  // its path column was read as "1000 of 1000 listed images are missing on disk (1, 1, 1, ...)".
  VP_REQUIRE(!table.header.empty() && path_col != split_col && path_col != patient_col && path_col != view_col,
             csv.string(), " line 1: bad header: no image path column (expected one named path, image_path, image, ",
             "file, filename, file_name or Image Index, or the paths first; the first column, \"",
             table.header.empty() ? std::string() : table.header[0], "\", is the ",
             path_col == split_col     ? "split"
             : path_col == patient_col ? "patient"
                                       : "view",
             " column)");
  std::vector<int> subgroup_cols;
  for (const std::string& name : options.subgroup_columns) {
    const int c = table.column(name);
    VP_REQUIRE(c >= 0, csv.string(), " line 1: --subgroup ", name, ": no such column");
    VP_REQUIRE(c != path_col && c != split_col, csv.string(), ": --subgroup ", name,
               ": the image path or split column cannot be a subgroup");
    subgroup_cols.push_back(c);
  }
  auto is_subgroup = [&](int c) {
    return std::find(subgroup_cols.begin(), subgroup_cols.end(), c) != subgroup_cols.end();
  };
  std::vector<int> label_cols;
  for (int c = 0; c < static_cast<int>(table.header.size()); ++c)
    if (c != path_col && c != split_col && c != patient_col && c != view_col && !is_subgroup(c))
      label_cols.push_back(c);
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
  if (joined) {
    // A label column holds label codes or label names: other numbers (class indices, regression targets) or codes
    // mixed with names cannot be read as either.
    const int c = label_cols[0];
    const std::string& column = table.header[c];
    auto other_number = [&](const auto& row) { return is_other_number(row[c]); };
    auto code = [&](const auto& row) { return is_code(row[c]) && !is_blank(row[c]); };
    auto first_value = [&](auto pick) {
      for (const auto& row : table.rows)
        if (pick(row)) return row[c];
      return std::string();
    };
    VP_REQUIRE(!std::any_of(table.rows.begin(), table.rows.end(), other_number), csv.string(), ": column \"", column,
               "\" holds numbers other than 1, 0 and -1 (\"", first_value(other_number), "\" at ",
               lines_where(table, other_number), "); a label column must hold ", kLabelCodesExpected,
               " or label names ('|'-joined when an image has several)");
    VP_REQUIRE(!std::any_of(table.rows.begin(), table.rows.end(), code), csv.string(), ": column \"", column,
               "\" mixes label codes (", lines_where(table, code), ") with label names (\"",
               first_value([&](const auto& row) { return !code(row) && !row[c].empty(); }),
               "\"); a label column must hold either label codes or label names");
  }

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
    for (const int c : subgroup_cols) entry.item.subgroup_values.push_back(row[c]);
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
    source.add(std::move(entry), path);  // a name too long for the file system is an image that is not there
  }
  // A '|' column where every image has exactly one label is a single-label (softmax) task; 0/1 columns and
  // rows with zero or several labels make it multi-label.
  source.multi_label = !(joined && every_row_one_label);
  // Cross-entropy over one class is zero whatever the model does: nothing could be learned.
  VP_REQUIRE(source.multi_label || source.label_names.size() >= 2, csv.string(), ": column \"",
             table.header[label_cols[0]], "\" holds one class (\"", source.label_names.front(), "\") in every row (",
             lines_where(table, [](const auto&) { return true; }), "): a single-label task needs at least two classes");
  source.no_finding_allowed = source.multi_label;
  warn_no_finding_label(source, table.header[label_cols[0]], joined, options, csv.string());
  return std::make_shared<FileDataset>(std::move(source), options);
}

}  // namespace vitpipe
