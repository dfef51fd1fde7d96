#include "data/csv_table.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>

#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

int CsvTable::column(std::string_view name) const {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return static_cast<int>(i);
  return -1;
}

int CsvTable::find_column(const std::vector<std::string>& names) const {
  for (const auto& name : names)
    for (size_t i = 0; i < header.size(); ++i)
      if (iequals(header[i], name)) return static_cast<int>(i);
  return -1;
}

std::string CsvTable::where(size_t row) const { return concat(source, " line ", row_lines.at(row)); }

CsvTable parse_csv(std::string_view text, const std::string& source) {
  CsvTable table;
  table.source = source;
  if (text.size() >= 3 && static_cast<unsigned char>(text[0]) == 0xEF && static_cast<unsigned char>(text[1]) == 0xBB &&
      static_cast<unsigned char>(text[2]) == 0xBF)
    text.remove_prefix(3);  // UTF-8 byte order mark (Excel)
  VP_REQUIRE(text.find('\0') == std::string_view::npos, source, ": not a text file (contains NUL bytes)");

  std::vector<std::string> fields;
  std::string field;
  int64_t line = 1;
  int64_t record_line = 1;
  size_t i = 0;
  bool header_done = false;
  auto finish_record = [&] {
    fields.push_back(std::move(field));
    field.clear();
    bool blank = fields.size() == 1 && trim(fields[0]).empty();
    if (!blank) {
      if (!header_done) {
        while (!fields.empty() && trim(fields.back()).empty()) fields.pop_back();
        VP_REQUIRE(!fields.empty(), source, " line ", record_line, ": empty header");
        for (auto& name : fields) name = std::string(trim(name));
        table.header = std::move(fields);
        header_done = true;
      } else {
        size_t expected = table.header.size();
        if (fields.size() > expected) {
          bool extra_empty = std::all_of(fields.begin() + static_cast<std::ptrdiff_t>(expected), fields.end(),
                                         [](const std::string& f) { return trim(f).empty(); });
          if (extra_empty) fields.resize(expected);
        }
        VP_REQUIRE(fields.size() == expected, source, " line ", record_line, ": expected ", expected,
                   " fields (as in the header), found ", fields.size());
        table.rows.push_back(std::move(fields));
        table.row_lines.push_back(record_line);
      }
    }
    fields.clear();
  };
  while (i < text.size()) {
    char c = text[i];
    if (c == '"' && trim(field).empty()) {
      // Quoted field: runs to the closing quote, may hold commas, quotes ("") and line breaks.
      field.clear();
      int64_t open_line = line;
      ++i;
      while (true) {
        VP_REQUIRE(i < text.size(), source, " line ", open_line, ": quoted field is never closed");
        char q = text[i];
        if (q == '"') {
          if (i + 1 < text.size() && text[i + 1] == '"') {
            field.push_back('"');
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        if (q == '\n') ++line;
        field.push_back(q);
        ++i;
      }
      // Only blanks may follow the closing quote before the separator.
      while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
      VP_REQUIRE(i >= text.size() || text[i] == ',' || text[i] == '\n' || text[i] == '\r', source, " line ", line,
                 ": unexpected character after a closing quote");
      continue;
    }
    if (c == ',') {
      fields.push_back(std::move(field));
      field.clear();
    } else if (c == '\n') {
      if (!field.empty() && field.back() == '\r') field.pop_back();
      finish_record();
      ++line;
      record_line = line;
    } else {
      field.push_back(c);
    }
    ++i;
  }
  if (!field.empty() || !fields.empty()) {
    if (!field.empty() && field.back() == '\r') field.pop_back();
    finish_record();
  }
  VP_REQUIRE(header_done, source, ": empty file (expected a header line)");
  for (auto& row : table.rows)
    for (auto& f : row)
      if (!f.empty() && (f.back() == '\r' || f.front() == ' ' || f.back() == ' ')) f = std::string(trim(f));
  return table;
}

std::string read_file_maybe_gzip(const std::filesystem::path& path) {
  if (path.extension() != ".gz") return read_text_file(path);
  gzFile file = gzopen(path.c_str(), "rb");
  VP_REQUIRE(file != nullptr, "cannot open ", path.string());
  std::string out;
  char buffer[1 << 16];
  while (true) {
    int n = gzread(file, buffer, sizeof(buffer));
    if (n < 0) {
      int code = 0;
      std::string message = gzerror(file, &code);
      gzclose(file);
      fail(path.string(), ": corrupt gzip data (", message, ")");
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  bool truncated = !gzeof(file);
  gzclose(file);
  VP_REQUIRE(!truncated, path.string(), ": truncated gzip data");
  return out;
}

CsvTable read_csv(const std::filesystem::path& path) { return parse_csv(read_file_maybe_gzip(path), path.string()); }

std::vector<std::string> read_line_list(const std::filesystem::path& path) {
  std::string text = read_file_maybe_gzip(path);
  VP_REQUIRE(text.find('\0') == std::string::npos, path.string(), ": not a text file (contains NUL bytes)");
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view entry = trim(std::string_view(text).substr(start, end - start));
    if (!entry.empty()) lines.emplace_back(entry);
    start = end + 1;
  }
  return lines;
}

std::string csv_escape(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace vitpipe
