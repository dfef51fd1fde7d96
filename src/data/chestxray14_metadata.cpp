#include "data/chestxray14_metadata.h"

#include <algorithm>
#include <charconv>
#include <unordered_map>
#include <unordered_set>

#include "data/chestxray14_findings.h"
#include "data/csv_table.h"
#include "util/error.h"

namespace vitpipe {
namespace {

bool parse_int(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::string joined_findings() {
  std::string all;
  for (const auto& f : chestxray14_findings()) all += (all.empty() ? "" : ", ") + f;
  return all + ", " + kNoFindingLabel;
}

}  // namespace

bool parse_chestxray14_age(const std::string& text, double* years) {
  if (text.empty()) return false;
  std::string digits = text;
  double unit = 1.0;
  char last = text.back();
  if (last == 'Y' || last == 'y' || last == 'M' || last == 'm' || last == 'D' || last == 'd' || last == 'W' ||
      last == 'w') {
    digits.pop_back();
    unit = (last == 'Y' || last == 'y')   ? 1.0
           : (last == 'M' || last == 'm') ? 1.0 / 12
           : (last == 'W' || last == 'w') ? 7.0 / 365
                                          : 1.0 / 365;
  }
  int64_t value = 0;
  if (!parse_int(digits, &value) || value < 0) return false;
  *years = static_cast<double>(value) * unit;
  return true;
}

std::vector<ChestXray14Record> read_chestxray14_csv(const std::filesystem::path& path) {
  CsvTable table = read_csv(path);
  auto require_column = [&](const char* name) {
    int c = table.column(name);
    if (c < 0) {
      std::string found;
      for (const auto& h : table.header) found += (found.empty() ? "" : ", ") + ("\"" + h + "\"");
      fail(path.string(), " line 1: bad header: no column \"", name, "\" (found ", found,
           "); expected NIH's Data_Entry_2017 header");
    }
    return c;
  };
  const int image_col = require_column("Image Index");
  const int labels_col = require_column("Finding Labels");
  const int patient_col = require_column("Patient ID");
  const int view_col = require_column("View Position");
  const int follow_col = table.column("Follow-up #");
  const int age_col = table.column("Patient Age");
  const int gender_col = table.column("Patient Gender");

  std::unordered_map<std::string, int32_t> finding_index;
  for (size_t i = 0; i < chestxray14_findings().size(); ++i)
    finding_index[chestxray14_findings()[i]] = static_cast<int32_t>(i);

  std::vector<ChestXray14Record> records;
  records.reserve(table.rows.size());
  std::unordered_map<std::string, int64_t> seen;
  for (size_t r = 0; r < table.rows.size(); ++r) {
    const auto& row = table.rows[r];
    ChestXray14Record rec;
    rec.line = table.row_lines[r];
    rec.image = row[image_col];
    VP_REQUIRE(!rec.image.empty(), table.where(r), ": empty Image Index");
    auto [it, inserted] = seen.emplace(rec.image, rec.line);
    VP_REQUIRE(inserted, table.where(r), ": image ", rec.image, " is listed twice (first on line ", it->second, ")");

    const std::string& labels = row[labels_col];
    VP_REQUIRE(!labels.empty(), table.where(r), ": empty Finding Labels (expected findings joined by '|' or \"",
               kNoFindingLabel, "\")");
    bool no_finding = false;
    size_t start = 0;
    while (start <= labels.size()) {
      size_t end = labels.find('|', start);
      if (end == std::string::npos) end = labels.size();
      std::string label = labels.substr(start, end - start);
      if (label == kNoFindingLabel) {
        no_finding = true;
      } else {
        auto found = finding_index.find(label);
        VP_REQUIRE(found != finding_index.end(), table.where(r), ": unknown label \"", label, "\" in Finding Labels \"",
                   labels, "\" (expected one of: ", joined_findings(), ")");
        rec.findings.push_back(found->second);
      }
      start = end + 1;
    }
    VP_REQUIRE(!(no_finding && !rec.findings.empty()), table.where(r), ": \"", kNoFindingLabel,
               "\" together with findings in \"", labels, "\"");
    std::sort(rec.findings.begin(), rec.findings.end());
    VP_REQUIRE(std::adjacent_find(rec.findings.begin(), rec.findings.end()) == rec.findings.end(), table.where(r),
               ": a finding is repeated in \"", labels, "\"");

    VP_REQUIRE(parse_int(row[patient_col], &rec.patient_id) && rec.patient_id >= 0, table.where(r), ": Patient ID \"",
               row[patient_col], "\" is not a non-negative integer");
    if (follow_col >= 0)
      VP_REQUIRE(parse_int(row[follow_col], &rec.follow_up) && rec.follow_up >= 0, table.where(r), ": Follow-up # \"",
                 row[follow_col], "\" is not a non-negative integer");
    if (age_col >= 0)
      VP_REQUIRE(parse_chestxray14_age(row[age_col], &rec.age_years), table.where(r), ": Patient Age \"", row[age_col],
                 "\" is not an age (expected e.g. 57, 058Y, 004M, 001D)");
    if (gender_col >= 0) rec.gender = row[gender_col];
    rec.view = row[view_col];
    records.push_back(std::move(rec));
  }
  return records;
}

}  // namespace vitpipe
