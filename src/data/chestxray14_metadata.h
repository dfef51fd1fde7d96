// NIH's Data_Entry_2017*.csv: one row per image. Both variants are read: v2020 (LF, plain numbers) and the original
// (CRLF, a trailing empty header column, zero-padded fields such as "058Y", "000", "00000001").
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace vitpipe {

struct ChestXray14Record {
  std::string image;              // Image Index, e.g. "00000001_000.png"
  std::vector<int32_t> findings;  // indices into chestxray14_findings(), ascending; empty = "No Finding"
  int64_t follow_up = -1;         // Follow-up # (-1 if the column is absent)
  int64_t patient_id = 0;         // Patient ID as a number ("00000001" and "1" are patient 1)
  double age_years = -1;          // Patient Age: "57", "058Y", "004M", "001D"; NIH's impossible ages are kept
  std::string gender;             // "M" / "F" ("" if the column is absent)
  std::string view;               // View Position: "PA" / "AP"
  int64_t line = 0;               // line in the CSV, for messages
};

// Throws naming the file and line on: a missing required column (Image Index, Finding Labels, Patient ID,
// View Position), a wrong field count, an unknown label, "No Finding" together with a finding, a duplicate image,
// an unparsable patient id or age.
std::vector<ChestXray14Record> read_chestxray14_csv(const std::filesystem::path& path);

// "058Y" -> 58, "57" -> 57, "004M" -> 4/12, "001D" -> 1/365; false if not of that form.
bool parse_chestxray14_age(const std::string& text, double* years);

}  // namespace vitpipe
