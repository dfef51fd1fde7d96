#include "data/csv_table.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/size_limits.h"

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

namespace {

// The CSV grammar as a state machine fed in chunks, so a file is never held whole and a record longer than
// max_csv_line_bytes() (a binary file, a runaway quote) is refused before it is buffered.
class CsvParser {
 public:
  CsvParser(std::string source, int64_t max_record_bytes) : max_record_bytes_(max_record_bytes) {
    table_.source = std::move(source);
  }

  void feed(std::string_view chunk) {
    if (!bom_checked_) {  // a UTF-8 byte order mark (Excel), possibly split across chunks
      const size_t take = std::min(chunk.size(), 3 - pending_.size());
      pending_.append(chunk.substr(0, take));
      chunk.remove_prefix(take);
      if (pending_.size() < 3) return;
      decide_byte_order_mark();
    }
    consume(chunk);
  }

  CsvTable finish() {
    if (!bom_checked_) decide_byte_order_mark();
    VP_REQUIRE(state_ != State::quoted, table_.source, " line ", open_line_, ": quoted field is never closed");
    if (!field_.empty() || !fields_.empty()) {
      if (!field_.empty() && field_.back() == '\r') field_.pop_back();
      finish_record();
    }
    VP_REQUIRE(header_done_, table_.source, ": empty file (expected a header line)");
    for (auto& row : table_.rows)
      for (auto& f : row)
        if (!f.empty() && (f.back() == '\r' || f.front() == ' ' || f.back() == ' ')) f = std::string(trim(f));
    return std::move(table_);
  }

 private:
  enum class State { unquoted, quoted, quote_in_quoted, after_quote };

  void decide_byte_order_mark() {
    bom_checked_ = true;
    std::string head;
    head.swap(pending_);
    const bool bom = head.size() == 3 && static_cast<unsigned char>(head[0]) == 0xEF &&
                     static_cast<unsigned char>(head[1]) == 0xBB && static_cast<unsigned char>(head[2]) == 0xBF;
    if (!bom) consume(head);
  }

  void consume(std::string_view text) {
    VP_REQUIRE(text.find('\0') == std::string_view::npos, table_.source, ": not a text file (contains NUL bytes)");
    for (char c : text) {
      VP_REQUIRE(++record_bytes_ <= max_record_bytes_, table_.source, " line ", record_line_,
                 ": a record longer than the limit of ", max_record_bytes_,
                 " bytes (not a CSV file? set VITPIPE_MAX_CSV_LINE_BYTES to raise the limit)");
      switch (state_) {
        case State::quoted:
          if (c == '"') {
            state_ = State::quote_in_quoted;
          } else {
            if (c == '\n') ++line_;
            field_.push_back(c);
          }
          continue;
        case State::quote_in_quoted:
          if (c == '"') {  // "" inside quotes: a literal quote
            field_.push_back('"');
            state_ = State::quoted;
            continue;
          }
          state_ = State::after_quote;
          [[fallthrough]];
        case State::after_quote:
          // Only blanks may follow the closing quote before the separator.
          if (c == ' ' || c == '\t') continue;
          VP_REQUIRE(c == ',' || c == '\n' || c == '\r', table_.source, " line ", line_,
                     ": unexpected character after a closing quote");
          state_ = State::unquoted;
          break;
        case State::unquoted:
          if (c == '"' && trim(field_).empty()) {
            // Quoted field: runs to the closing quote, may hold commas, quotes ("") and line breaks.
            field_.clear();
            open_line_ = line_;
            state_ = State::quoted;
            continue;
          }
          break;
      }
      if (c == ',') {
        fields_.push_back(std::move(field_));
        field_.clear();
      } else if (c == '\n') {
        if (!field_.empty() && field_.back() == '\r') field_.pop_back();
        finish_record();
        ++line_;
        record_line_ = line_;
        record_bytes_ = 0;
      } else {
        field_.push_back(c);
      }
    }
  }

  void finish_record() {
    fields_.push_back(std::move(field_));
    field_.clear();
    const bool blank = fields_.size() == 1 && trim(fields_[0]).empty();
    if (!blank) {
      if (!header_done_) {
        while (!fields_.empty() && trim(fields_.back()).empty()) fields_.pop_back();
        VP_REQUIRE(!fields_.empty(), table_.source, " line ", record_line_, ": empty header");
        for (auto& name : fields_) name = std::string(trim(name));
        table_.header = std::move(fields_);
        header_done_ = true;
      } else {
        const size_t expected = table_.header.size();
        if (fields_.size() > expected) {
          const bool extra_empty = std::all_of(fields_.begin() + static_cast<std::ptrdiff_t>(expected), fields_.end(),
                                               [](const std::string& f) { return trim(f).empty(); });
          if (extra_empty) fields_.resize(expected);
        }
        VP_REQUIRE(fields_.size() == expected, table_.source, " line ", record_line_, ": expected ", expected,
                   " fields (as in the header), found ", fields_.size());
        table_.rows.push_back(std::move(fields_));
        table_.row_lines.push_back(record_line_);
      }
    }
    fields_.clear();
  }

  CsvTable table_;
  const int64_t max_record_bytes_;
  std::string pending_;  // the first bytes, until the byte order mark is decided
  bool bom_checked_ = false;
  State state_ = State::unquoted;
  std::vector<std::string> fields_;
  std::string field_;
  int64_t line_ = 1, record_line_ = 1, open_line_ = 1;
  int64_t record_bytes_ = 0;
  bool header_done_ = false;
};

// Calls `sink` with the file's bytes in order, gunzipped when the name ends in .gz.
void read_chunks(const std::filesystem::path& path, const std::function<void(std::string_view)>& sink) {
  std::vector<char> buffer(1 << 16);
  if (path.extension() != ".gz") {
    std::ifstream in(path, std::ios::binary);
    VP_REQUIRE(in, "cannot open ", path.string(), ": ", std::strerror(errno));
    while (in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      if (in.gcount() > 0) sink(std::string_view(buffer.data(), static_cast<size_t>(in.gcount())));
    }
    VP_REQUIRE(!in.bad(), "cannot read ", path.string());
    return;
  }
  gzFile file = gzopen(path.c_str(), "rb");
  VP_REQUIRE(file != nullptr, "cannot open ", path.string());
  struct Closer {
    gzFile file;
    ~Closer() { gzclose(file); }
  } closer{file};
  while (true) {
    const int n = gzread(file, buffer.data(), static_cast<unsigned>(buffer.size()));
    if (n < 0) {
      int code = 0;
      fail(path.string(), ": corrupt gzip data (", gzerror(file, &code), ")");
    }
    if (n == 0) break;
    sink(std::string_view(buffer.data(), static_cast<size_t>(n)));
  }
  VP_REQUIRE(gzeof(file), path.string(), ": truncated gzip data");
}

}  // namespace

CsvTable parse_csv(std::string_view text, const std::string& source) {
  CsvParser parser(source, max_csv_line_bytes());
  parser.feed(text);
  return parser.finish();
}

std::string read_file_maybe_gzip(const std::filesystem::path& path) {
  std::string out;
  read_chunks(path, [&](std::string_view chunk) { out.append(chunk); });
  return out;
}

CsvTable read_csv(const std::filesystem::path& path) {
  CsvParser parser(path.string(), max_csv_line_bytes());
  read_chunks(path, [&](std::string_view chunk) { parser.feed(chunk); });
  return parser.finish();
}

std::vector<std::string> read_line_list(const std::filesystem::path& path) {
  const int64_t max_line = max_csv_line_bytes();
  std::vector<std::string> lines;
  std::string line;
  int64_t number = 1;
  auto finish_line = [&] {
    std::string_view entry = trim(line);
    if (!entry.empty()) lines.emplace_back(entry);
    line.clear();
    ++number;
  };
  read_chunks(path, [&](std::string_view chunk) {
    VP_REQUIRE(chunk.find('\0') == std::string_view::npos, path.string(), ": not a text file (contains NUL bytes)");
    for (char c : chunk) {
      if (c == '\n') {
        finish_line();
        continue;
      }
      VP_REQUIRE(static_cast<int64_t>(line.size()) < max_line, path.string(), " line ", number,
                 ": a line longer than the limit of ", max_line,
                 " bytes (not a list of image names? set VITPIPE_MAX_CSV_LINE_BYTES to raise the limit)");
      line.push_back(c);
    }
  });
  finish_line();
  return lines;
}

std::string csv_escape(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace vitpipe
