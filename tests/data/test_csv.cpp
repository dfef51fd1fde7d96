// CSV parsing and NIH's Data_Entry_2017 files (both variants, full 112,120 rows, from tests/fixtures).
#include <map>
#include <set>

#include "data/chestxray14_findings.h"
#include "data/chestxray14_metadata.h"
#include "data/csv_table.h"
#include "test_helpers.h"

namespace vitpipe {
namespace {

using testing::expect_error;
using testing::fixtures_dir;
using testing::TempDir;
using testing::write_file;

TEST(CsvTable, ParsesQuotesCrlfAndTrailingEmptyColumn) {
  CsvTable t = parse_csv("a,b,\r\n1,\"x, \"\"y\"\"\"\r\n\r\n2,\"multi\nline\"\r\n", "t.csv");
  ASSERT_EQ(t.header, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0][1], "x, \"y\"");
  EXPECT_EQ(t.rows[1][1], "multi\nline");
  EXPECT_EQ(t.row_lines[0], 2);
  EXPECT_EQ(t.row_lines[1], 4);
}

TEST(CsvTable, AcceptsExtraEmptyFieldsOnly) {
  CsvTable t = parse_csv("a,b\n1,2,,\n", "t.csv");
  EXPECT_EQ(t.rows[0].size(), 2u);
  expect_error([] { parse_csv("a,b\n1,2\n1,2,3\n", "t.csv"); }, {"t.csv line 3", "expected 2 fields", "found 3"});
  expect_error([] { parse_csv("a,b,c\n1,2\n", "t.csv"); }, {"t.csv line 2", "found 2"});
  expect_error([] { parse_csv("", "t.csv"); }, {"t.csv", "empty"});
  expect_error([] { parse_csv("a,b\n\"open,2\n", "t.csv"); }, {"t.csv line 2", "never closed"});
}

TEST(ChestXray14Csv, Ages) {
  double years = 0;
  ASSERT_TRUE(parse_chestxray14_age("058Y", &years));
  EXPECT_EQ(years, 58);
  ASSERT_TRUE(parse_chestxray14_age("57", &years));
  EXPECT_EQ(years, 57);
  ASSERT_TRUE(parse_chestxray14_age("004M", &years));
  EXPECT_DOUBLE_EQ(years, 4.0 / 12);
  ASSERT_TRUE(parse_chestxray14_age("001D", &years));
  EXPECT_DOUBLE_EQ(years, 1.0 / 365);
  EXPECT_FALSE(parse_chestxray14_age("abc", &years));
  EXPECT_FALSE(parse_chestxray14_age("", &years));
}

// Counts from the CSV files themselves (zcat | cut | tr | sort | uniq -c), not from vitpipe.
const std::map<std::string, int64_t> kLabelCountsV2020 = {
    {"Atelectasis", 11559},       {"Cardiomegaly", 2776}, {"Consolidation", 4667}, {"Edema", 2303},
    {"Effusion", 13317},          {"Emphysema", 2516},    {"Fibrosis", 1686},      {"Hernia", 227},
    {"Infiltration", 19894},      {"Mass", 5782},         {"No Finding", 60361},   {"Nodule", 6331},
    {"Pleural_Thickening", 3385}, {"Pneumonia", 1431},    {"Pneumothorax", 5302}};
const std::map<std::string, int64_t> kLabelCounts2017 = {
    {"Atelectasis", 11535},       {"Cardiomegaly", 2772}, {"Consolidation", 4667}, {"Edema", 2303},
    {"Effusion", 13307},          {"Emphysema", 2516},    {"Fibrosis", 1686},      {"Hernia", 227},
    {"Infiltration", 19870},      {"Mass", 5746},         {"No Finding", 60412},   {"Nodule", 6323},
    {"Pleural_Thickening", 3385}, {"Pneumonia", 1353},    {"Pneumothorax", 5298}};

std::map<std::string, int64_t> label_counts(const std::vector<ChestXray14Record>& records) {
  std::map<std::string, int64_t> counts;
  for (const auto& r : records) {
    if (r.findings.empty()) counts[kNoFindingLabel]++;
    for (int32_t f : r.findings) counts[chestxray14_findings()[static_cast<size_t>(f)]]++;
  }
  return counts;
}

// Every row re-read independently (split on ',' and '|'): the parsed records must say the same.
void expect_records_match_text(const std::vector<ChestXray14Record>& records, const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(line);
    start = end + 1;
  }
  ASSERT_EQ(records.size() + 1, lines.size());
  for (size_t i = 0; i < records.size(); ++i) {
    std::vector<std::string> f;
    size_t s = 0;
    const std::string& line = lines[i + 1];
    while (true) {
      size_t c = line.find(',', s);
      f.push_back(line.substr(s, c == std::string::npos ? std::string::npos : c - s));
      if (c == std::string::npos) break;
      s = c + 1;
    }
    const auto& r = records[i];
    ASSERT_EQ(r.image, f[0]) << "row " << i;
    std::string joined;
    for (int32_t k : r.findings) joined += (joined.empty() ? "" : "|") + chestxray14_findings()[static_cast<size_t>(k)];
    if (joined.empty()) joined = kNoFindingLabel;
    // The file's order of labels is alphabetical too; compare as sets to be safe.
    std::vector<std::string> a, b;
    for (size_t p = 0, q; p <= joined.size(); p = q + 1) {
      q = std::min(joined.find('|', p), joined.size());
      a.push_back(joined.substr(p, q - p));
    }
    for (size_t p = 0, q; p <= f[1].size(); p = q + 1) {
      q = std::min(f[1].find('|', p), f[1].size());
      b.push_back(f[1].substr(p, q - p));
    }
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    ASSERT_EQ(a, b) << r.image;
    ASSERT_EQ(r.follow_up, std::stoll(f[2])) << r.image;
    ASSERT_EQ(r.patient_id, std::stoll(f[3])) << r.image;
    ASSERT_EQ(r.gender, f[5]) << r.image;
    ASSERT_EQ(r.view, f[6]) << r.image;
  }
}

TEST(ChestXray14Csv, BothVariantsAgreeWithTheirContent) {
  for (const char* name : {"Data_Entry_2017_v2020.csv.gz", "Data_Entry_2017.csv.gz"}) {
    SCOPED_TRACE(name);
    const auto path = fixtures_dir() / name;
    const auto records = read_chestxray14_csv(path);
    ASSERT_EQ(records.size(), 112120u);
    expect_records_match_text(records, read_file_maybe_gzip(path));
    EXPECT_EQ(label_counts(records),
              std::string(name).find("v2020") != std::string::npos ? kLabelCountsV2020 : kLabelCounts2017);
    std::set<int64_t> patients;
    int64_t pa = 0;
    for (const auto& r : records) {
      patients.insert(r.patient_id);
      pa += r.view == "PA";
    }
    EXPECT_EQ(patients.size(), 30805u);
    EXPECT_EQ(pa, 67310);
  }
}

TEST(ChestXray14Csv, VariantsListTheSameImagesAndPatients) {
  const auto a = read_chestxray14_csv(fixtures_dir() / "Data_Entry_2017_v2020.csv.gz");
  const auto b = read_chestxray14_csv(fixtures_dir() / "Data_Entry_2017.csv.gz");
  ASSERT_EQ(a.size(), b.size());
  std::map<std::string, const ChestXray14Record*> old_by_name;  // the two files order their rows differently
  for (const auto& r : b) old_by_name[r.image] = &r;
  int64_t age_differs = 0, labels_differ = 0;
  for (const auto& r : a) {
    auto it = old_by_name.find(r.image);
    ASSERT_NE(it, old_by_name.end()) << r.image;
    ASSERT_EQ(r.patient_id, it->second->patient_id);  // "1" and "00000001"
    ASSERT_EQ(r.view, it->second->view);
    age_differs += r.age_years != it->second->age_years;
    labels_differ += r.findings != it->second->findings;
  }
  EXPECT_EQ(labels_differ, 181);  // README: 181 label strings differ between the variants
  EXPECT_GT(age_differs, 0);
  // The old file's impossible ages are kept as written (148Y..414Y).
  double oldest = 0;
  for (const auto& r : b) oldest = std::max(oldest, r.age_years);
  EXPECT_EQ(oldest, 414);
}

TEST(ChestXray14Csv, BadInputNamesFileAndLine) {
  TempDir dir;
  const std::string header =
      "Image Index,Finding Labels,Follow-up #,Patient ID,Patient Age,Patient Gender,View Position\n";
  write_file(dir / "unknown.csv", header + "a.png,Cardiomegaly,0,1,57,M,PA\nb.png,Cardiomegally,0,1,57,M,PA\n");
  expect_error([&] { read_chestxray14_csv(dir / "unknown.csv"); },
               {"unknown.csv line 3", "unknown label \"Cardiomegally\""});
  write_file(dir / "header.csv", "Image,Labels,Patient,View\na.png,Mass,1,PA\n");
  expect_error([&] { read_chestxray14_csv(dir / "header.csv"); }, {"header.csv line 1", "bad header", "Image Index"});
  write_file(dir / "fields.csv", header + "a.png,Mass,0,1,57,M\n");
  expect_error([&] { read_chestxray14_csv(dir / "fields.csv"); },
               {"fields.csv line 2", "expected 7 fields", "found 6"});
  write_file(dir / "mixed.csv", header + "a.png,No Finding|Mass,0,1,57,M,PA\n");
  expect_error([&] { read_chestxray14_csv(dir / "mixed.csv"); }, {"mixed.csv line 2", "No Finding"});
  write_file(dir / "twice.csv", header + "a.png,Mass,0,1,57,M,PA\na.png,Mass,0,1,57,M,PA\n");
  expect_error([&] { read_chestxray14_csv(dir / "twice.csv"); }, {"twice.csv line 3", "listed twice"});
  write_file(dir / "patient.csv", header + "a.png,Mass,0,x1,57,M,PA\n");
  expect_error([&] { read_chestxray14_csv(dir / "patient.csv"); }, {"patient.csv line 2", "Patient ID"});
  write_file(dir / "age.csv", header + "a.png,Mass,0,1,old,M,PA\n");
  expect_error([&] { read_chestxray14_csv(dir / "age.csv"); }, {"age.csv line 2", "Patient Age"});
  write_file(dir / "broken.csv.gz", "not gzip at all, but long enough to look like data");
  EXPECT_THROW(read_chestxray14_csv(dir / "broken.csv.gz"), Error);
}

}  // namespace
}  // namespace vitpipe
