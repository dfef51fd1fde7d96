// Label sets that cannot train: refused where the CSV is read (naming the column and rows), or warned about per
// label once the training split is known.
#include <gtest/gtest.h>

#include "data/file_dataset.h"
#include "data/label_checks.h"
#include "data/label_codes.h"
#include "test_helpers.h"

namespace vitpipe {
namespace {

using testing::expect_error;
using testing::TempDir;
using testing::write_file;
namespace fs = std::filesystem;

// data.csv with `text` and an (empty) image file for every row's first field.
fs::path write_csv_dataset(const TempDir& dir, const std::string& text) {
  const fs::path csv = dir / "data.csv";
  write_file(csv, text);
  size_t line_start = text.find('\n') + 1;
  while (line_start < text.size()) {
    const size_t end = text.find('\n', line_start);
    const std::string line = text.substr(line_start, end - line_start);
    if (!line.empty()) write_file(dir / line.substr(0, line.find(',')), "");
    line_start = end == std::string::npos ? text.size() : end + 1;
  }
  return csv;
}

std::shared_ptr<FileDataset> open(const fs::path& csv) { return open_csv_dataset(csv, DatasetOptions{}); }

TEST(LabelSets, ColumnOfOneNumberOtherThanZeroOrOneIsRefused) {
  TempDir dir;
  const fs::path csv = write_csv_dataset(dir, "path,label\na.png,2\nb.png,2\nc.png,2\nd.png,2\n");
  expect_error([&] { open(csv); }, {csv.string() + ": column \"label\" holds numbers other than 1, 0 and -1 (\"2\" at "
                                                   "lines 2, 3, 4 and 1 more)",
                                    "or label names"});
}

TEST(LabelSets, ClassIndicesAndFractionsAreRefusedNamingTheRows) {
  TempDir dir;
  fs::path csv = write_csv_dataset(dir, "path,grade\na.png,0\nb.png,1\nc.png,3\nd.png,1\n");
  expect_error([&] { open(csv); }, {"column \"grade\" holds numbers other than 1, 0 and -1 (\"3\" at line 4)"});
  // A fraction in a one-column-per-label file (CheXpert's -1 is a label code there): column and line are named.
  csv = write_csv_dataset(dir, "path,Edema,Effusion\na.png,1,0\nb.png,0.5,1\n");
  expect_error([&] { open(csv); }, {csv.string() + " line 3: column \"Edema\" holds \"0.5\"", kLabelCodesExpected});
}

TEST(LabelSets, ZeroOneMixedWithNamesIsRefused) {
  TempDir dir;
  const fs::path csv = write_csv_dataset(dir, "path,finding\na.png,Mass\nb.png,0\nc.png,Effusion\nd.png,1\n");
  expect_error([&] { open(csv); },
               {"column \"finding\" mixes label codes (lines 3 and 5) with label names (\"Mass\")"});
}

TEST(LabelSets, SingleLabelWithOneClassIsRefused) {
  TempDir dir;
  const fs::path csv =
      write_csv_dataset(dir, "path,finding\na.png,Cardiomegaly\nb.png,Cardiomegaly\nc.png,Cardiomegaly\n");
  expect_error([&] { open(csv); }, {csv.string() + ": column \"finding\" holds one class (\"Cardiomegaly\") in every "
                                                   "row (lines 2, 3 and 4): a single-label task needs at least two "
                                                   "classes"});
  // The same label with an empty row is a multi-label task (the empty row is a negative): that can train.
  const fs::path with_negative = write_csv_dataset(dir, "path,finding\na.png,Cardiomegaly\nb.png,\n");
  EXPECT_TRUE(open(with_negative)->multi_label());
}

TEST(LabelSets, LabelWithoutPositiveOrNegativeInTrainingIsAWarningNamingIt) {
  TempDir dir;
  const fs::path csv = write_csv_dataset(dir,
                                         "path,split,red,blue,white\n"
                                         "a.png,train,1,0,1\nb.png,train,0,0,1\nc.png,train,1,0,1\n"
                                         "d.png,test,1,1,0\n");
  const auto dataset = open(csv);
  const std::vector<std::string> warnings = check_trainable_labels(*dataset, Split::train);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("label \"blue\" has no positive image in the train split (0 of 3 images positive)"),
            std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[1].find("label \"white\" has no negative image in the train split (3 of 3 images positive)"),
            std::string::npos)
      << warnings[1];
  EXPECT_NE(warnings[1].find("ROC-AUC is undefined"), std::string::npos);
  EXPECT_TRUE(check_trainable_labels(*dataset, Split::test).size() == 3u);  // one image: every label degenerate
}

TEST(LabelSets, ClassWithoutTrainingImageIsAWarning) {
  TempDir dir;
  const fs::path csv = write_csv_dataset(dir,
                                         "path,split,label\n"
                                         "a.png,train,cat\nb.png,train,dog\nc.png,test,cow\nd.png,val,dog\n");
  const auto dataset = open(csv);
  ASSERT_FALSE(dataset->multi_label());
  const std::vector<std::string> warnings = check_trainable_labels(*dataset, Split::train);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("class \"cow\" has no image in the train split (2 images)"), std::string::npos)
      << warnings[0];
}

TEST(LabelSets, SingleLabelFolderWithOneClassCannotTrain) {
  TempDir dir;
  write_file(dir / "only" / "a.png", "");
  write_file(dir / "only" / "b.png", "");
  const auto dataset = open_folder_dataset(dir.path(), DatasetOptions{});
  expect_error([&] { check_trainable_labels(*dataset, Split::train); },
               {"a single-label data set with 1 class (\"only\"): a single-label task needs at least two classes"});
}

}  // namespace
}  // namespace vitpipe
