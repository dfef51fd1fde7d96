// vindr-cxr:ROOT (VinDr-CXR 1.0.0 on PhysioNet): ROOT/annotations/image_labels_train.csv (image_id, rad_id and one
// 0/1 column per finding: three radiologists per training image, one row each) and image_labels_test.csv (the
// consensus of five, one row per image; "Other disease" there is "Other diseases" in train), DICOM images at
// ROOT/train/<image_id>.dicom and ROOT/test/<image_id>.dicom. --label-vote any: a finding is positive when any reader
// marked it; majority: when more than half of the image's readers did. Splits: train is the train_val pool (each
// image its own patient: the files carry no patient id), test is the official test set.
#include <algorithm>
#include <map>
#include <tuple>

#include "data/csv_table.h"
#include "data/file_dataset.h"
#include "util/error.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

fs::path find_annotation(const fs::path& root, const std::string& name) {
  for (const fs::path& p : {root / "annotations" / name, root / name})
    if (fs::is_regular_file(p)) return p;
  return {};
}

fs::path find_image(const fs::path& folder, const std::string& id) {
  for (const char* suffix : {".dicom", ".dcm", ""}) {
    const fs::path p = folder / (id + suffix);
    if (fs::is_regular_file(p)) return p;
  }
  return folder / (id + ".dicom");
}

struct Votes {
  int readers = 0;
  std::vector<int> positives;
};

}  // namespace

std::shared_ptr<FileDataset> open_vindr_cxr_dataset(const fs::path& root_in, const DatasetOptions& options) {
  VP_REQUIRE(fs::is_directory(root_in), "vindr-cxr:", root_in.string(), ": not a directory");
  const fs::path root = fs::absolute(root_in).lexically_normal();
  const fs::path train_csv = find_annotation(root, "image_labels_train.csv");
  const fs::path test_csv = find_annotation(root, "image_labels_test.csv");
  VP_REQUIRE(!train_csv.empty() && !test_csv.empty(), root.string(),
             ": no annotations/image_labels_train.csv and annotations/image_labels_test.csv (VinDr-CXR's labels)");

  FileDataset::Source source;
  source.spec = "vindr-cxr:" + root.string();
  source.kind = "vindr-cxr";
  source.multi_label = true;
  source.metadata_files = {train_csv, test_csv};
  source.listing_options["label_vote"] = label_vote_name(options.label_vote);
  for (const auto& [csv, split, folder] : {std::tuple{train_csv, SourceSplit::train_val, root / "train"},
                                           std::tuple{test_csv, SourceSplit::test, root / "test"}}) {
    const CsvTable table = read_csv(csv);
    const int id_col = table.column("image_id"), reader_col = table.column("rad_id");
    VP_REQUIRE(id_col >= 0, csv.string(), " line 1: no \"image_id\" column");
    std::vector<int> label_cols;  // per label of source.label_names
    if (source.label_names.empty()) {
      for (int c = 0; c < static_cast<int>(table.header.size()); ++c) {
        if (c == id_col || c == reader_col) continue;
        source.label_names.push_back(table.header[static_cast<size_t>(c)]);
        label_cols.push_back(c);
      }
      VP_REQUIRE(!label_cols.empty(), csv.string(), " line 1: no label columns");
    } else {
      for (const auto& label : source.label_names) {
        int c = table.column(label);
        if (c < 0 && label == "Other diseases") c = table.column("Other disease");
        VP_REQUIRE(c >= 0, csv.string(), " line 1: no \"", label, "\" column (", train_csv.filename().string(),
                   " has it)");
        label_cols.push_back(c);
      }
    }
    std::map<std::string, Votes> votes;  // sorted by image id
    for (size_t r = 0; r < table.rows.size(); ++r) {
      const auto& row = table.rows[r];
      Votes& v = votes[row[id_col]];
      v.positives.resize(label_cols.size(), 0);
      ++v.readers;
      for (size_t k = 0; k < label_cols.size(); ++k) {
        const std::string& cell = row[label_cols[k]];
        const bool one = cell == "1" || cell == "1.0";
        VP_REQUIRE(one || cell == "0" || cell == "0.0", table.where(r), ": column \"", source.label_names[k],
                   "\" holds \"", cell, "\" (expected 0 or 1)");
        v.positives[k] += one ? 1 : 0;
      }
    }
    for (const auto& [id, v] : votes) {
      SourceEntry entry;
      entry.item.name = folder.filename().string() + "/" + id;
      for (size_t k = 0; k < v.positives.size(); ++k) {
        const bool positive =
            options.label_vote == LabelVote::any ? v.positives[k] > 0 : 2 * v.positives[k] > v.readers;
        if (positive) entry.item.labels.push_back(static_cast<int32_t>(k));
      }
      entry.source_split = split;
      const fs::path path = find_image(folder, id);
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
