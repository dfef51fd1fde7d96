// CSV tables as spreadsheets, pandas and NIH write them: comma-separated, LF or CRLF line ends, optional "quoted"
// fields with "" escapes, trailing empty columns tolerated. Files ending in .gz are decompressed (zlib).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace vitpipe {

struct CsvTable {
  std::string source;                          // file name used in error messages
  std::vector<std::string> header;             // trailing empty names dropped
  std::vector<std::vector<std::string>> rows;  // each exactly header.size() fields
  std::vector<int64_t> row_lines;              // 1-based line of each row in the file, for messages

  int column(std::string_view name) const;  // index of the column, -1 if absent (exact match)
  // The first of `names` present (case-insensitive), -1 if none.
  int find_column(const std::vector<std::string>& names) const;
  std::string where(size_t row) const;  // "file line N"
};

// Every row must have as many fields as the header (extra fields are accepted only when empty, as in NIH's old
// Data_Entry_2017.csv whose header ends with a comma); otherwise the error names the file, line and counts.
CsvTable parse_csv(std::string_view text, const std::string& source);
CsvTable read_csv(const std::filesystem::path& path);

// A field for a CSV line: quoted (with doubled quotes) when it holds a comma, quote or line break.
std::string csv_escape(const std::string& text);

// The whole file; gunzipped when the name ends in .gz.
std::string read_file_maybe_gzip(const std::filesystem::path& path);

// One entry per non-empty line (CR stripped, surrounding blanks trimmed): the split lists of ChestX-ray14.
std::vector<std::string> read_line_list(const std::filesystem::path& path);

}  // namespace vitpipe
