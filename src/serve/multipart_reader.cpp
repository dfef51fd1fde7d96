#include "serve/multipart_reader.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <optional>

#include "util/error.h"

namespace vitpipe {
namespace {

// RFC 7230 tchar: what a media type's type, subtype and parameter names, and a header field's name, are made of.
bool is_token_char(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return c != '\0' && std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// A control character other than a tab: never in a header value or quoted string.
bool is_control(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return (byte < 0x20 && c != '\t') || byte == 0x7f;
}

char lower_ascii(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::string lower(std::string_view text) {
  std::string result(text);
  std::transform(result.begin(), result.end(), result.begin(), lower_ascii);
  return result;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower_ascii(x) == lower_ascii(y); });
}

std::string_view trim_whitespace(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// Untrusted text for an error message: quoted, cut to a readable length, other than printable ASCII as \xNN.
std::string shown(std::string_view text) {
  constexpr size_t kMaxShown = 100;
  std::string result = "\"";
  for (const char c : text.substr(0, kMaxShown)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f && c != '"' && c != '\\') {
      result += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      result += escaped;
    }
  }
  result += text.size() > kMaxShown ? "\"..." : "\"";
  return result;
}

size_t skip_whitespace(std::string_view text, size_t at) {
  while (at < text.size() && (text[at] == ' ' || text[at] == '\t')) ++at;
  return at;
}

size_t skip_token(std::string_view text, size_t at) {
  while (at < text.size() && is_token_char(text[at])) ++at;
  return at;
}

// An unquoted parameter value: a token, and (lenient) the separators clients leave unquoted, as in
// type=application/dicom; a value ends at whitespace, ';' or a quote.
size_t skip_unquoted_value(std::string_view text, size_t at) {
  while (at < text.size() && text[at] > ' ' && text[at] < 0x7f && text[at] != ';' && text[at] != '"') ++at;
  return at;
}

// One part's text (between the line end of one delimiter line and the CRLF of the next delimiter): header lines,
// an empty line, the body. Only the first max_header_bytes are looked at for headers, so a part of binary data
// without headers costs a bounded scan.
MultipartPart parse_part(std::string_view text, size_t index, const MultipartLimits& limits) {
  MultipartPart part;
  const std::string_view header_window = text.substr(0, std::min(text.size(), limits.max_header_bytes));
  size_t at = 0;
  while (at < text.size()) {
    const size_t line_feed = header_window.find('\n', at);
    VP_REQUIRE(line_feed != std::string_view::npos || header_window.size() == text.size(), "multipart body: part ",
               index, ": no end of its header section within ", limits.max_header_bytes,
               " bytes (the limit on a part's header lines; is the empty line between headers and body missing?)");
    // The part's last line needs no line end: the CRLF before the next delimiter belongs to the delimiter.
    const size_t next = line_feed == std::string_view::npos ? text.size() : line_feed + 1;
    std::string_view line = text.substr(at, next - at);
    if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    at = next;
    if (line.empty()) {
      part.body = text.substr(at);
      return part;
    }
    if (line.front() == ' ' || line.front() == '\t') {  // obsolete folding (RFC 5322 2.2.3): unfolded
      VP_REQUIRE(!part.headers.empty(), "multipart body: part ", index, ": its first header line ", shown(line),
                 " starts with whitespace (a continuation of no header)");
      const std::string_view continuation = trim_whitespace(line);
      for (const char c : continuation)
        VP_REQUIRE(!is_control(c), "multipart body: part ", index, ": header ", part.headers.back().first,
                   " has a control character");
      std::string& value = part.headers.back().second;  // trimmed as a whole: one space between non-empty pieces
      if (!value.empty() && !continuation.empty()) value += ' ';
      value += continuation;
      continue;
    }
    const size_t colon = line.find(':');
    VP_REQUIRE(colon != std::string_view::npos, "multipart body: part ", index, ": header line ", shown(line),
               " has no ':' (is the empty line between the headers and the body missing?)");
    const std::string_view name = line.substr(0, colon);
    VP_REQUIRE(!name.empty() && skip_token(name, 0) == name.size(), "multipart body: part ", index,
               ": malformed header name ", shown(name));
    const std::string_view value = trim_whitespace(line.substr(colon + 1));
    for (const char c : value)
      VP_REQUIRE(!is_control(c), "multipart body: part ", index, ": header ", shown(name),
                 " has a control character in its value ", shown(value));
    part.headers.emplace_back(lower(name), std::string(value));
  }
  part.body = text.substr(text.size());  // headers only (or nothing at all): an empty body
  return part;
}

}  // namespace

std::string MediaType::parameter(std::string_view name) const {
  for (const auto& [key, value] : parameters)
    if (equals_ignoring_case(key, name)) return value;
  return {};
}

bool MediaType::has_parameter(std::string_view name) const {
  return std::any_of(parameters.begin(), parameters.end(),
                     [&](const auto& parameter) { return equals_ignoring_case(parameter.first, name); });
}

std::string MultipartPart::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (equals_ignoring_case(key, name)) return value;
  return {};
}

MediaType parse_media_type(std::string_view header_value) {
  const auto refuse = [&](const auto&... why) { fail("Content-Type ", shown(header_value), ": ", why...); };
  const std::string_view text = header_value;
  MediaType media;
  size_t at = skip_whitespace(text, 0);
  size_t end = skip_token(text, at);
  if (end == at) refuse("expected a media type (type/subtype)");
  media.type = lower(text.substr(at, end - at));
  if (end == text.size() || text[end] != '/') refuse("expected '/' and a subtype after the type ", shown(media.type));
  at = end + 1;
  end = skip_token(text, at);
  if (end == at) refuse("expected a subtype after '/'");
  media.subtype = lower(text.substr(at, end - at));
  at = skip_whitespace(text, end);
  while (at < text.size()) {
    if (text[at] != ';')
      refuse("unexpected ", shown(text.substr(at, 1)), " at offset ", at, " (parameters follow ';')");
    at = skip_whitespace(text, at + 1);
    if (at == text.size() || text[at] == ';') continue;  // an empty parameter: nothing to read
    end = skip_token(text, at);
    if (end == at) refuse("expected a parameter name at offset ", at);
    std::string name = lower(text.substr(at, end - at));
    at = skip_whitespace(text, end);
    if (at == text.size() || text[at] != '=') refuse("parameter ", name, " has no '=' and value");
    at = skip_whitespace(text, at + 1);
    std::string value;
    if (at < text.size() && text[at] == '"') {  // quoted-string: \x stands for x
      bool closed = false;
      for (++at; at < text.size();) {
        char c = text[at++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\') {
          if (at == text.size()) break;
          c = text[at++];
        }
        if (is_control(c)) refuse("parameter ", name, " has a control character in its quoted value");
        value += c;
      }
      if (!closed) refuse("parameter ", name, " has an unterminated quoted string");
    } else {
      end = skip_unquoted_value(text, at);
      if (end == at) refuse("parameter ", name, " has no value (a token or a quoted string)");
      value = text.substr(at, end - at);
      at = end;
    }
    media.parameters.emplace_back(std::move(name), std::move(value));
    at = skip_whitespace(text, at);
  }
  // A repeated parameter (two boundaries) is ambiguous: sorted names, so that many parameters cost n log n.
  std::vector<std::string_view> names;
  for (const auto& parameter : media.parameters) names.push_back(parameter.first);
  std::sort(names.begin(), names.end());
  const auto repeated = std::adjacent_find(names.begin(), names.end());
  if (repeated != names.end()) refuse("parameter ", *repeated, " appears twice");
  return media;
}

std::vector<MultipartPart> parse_multipart(std::string_view body, std::string_view boundary,
                                           const MultipartLimits& limits) {
  VP_REQUIRE(!boundary.empty(), "multipart body: no boundary (the Content-Type needs a boundary parameter)");
  VP_REQUIRE(boundary.size() <= 70, "multipart body: the boundary is ", boundary.size(),
             " characters long; RFC 2046 allows at most 70");
  for (const char c : boundary)
    VP_REQUIRE(!is_control(c) && static_cast<unsigned char>(c) < 0x80 && c != '\t', "multipart body: the boundary ",
               shown(boundary), " has a character that is not printable ASCII");
  VP_REQUIRE(boundary.back() != ' ', "multipart body: the boundary ", shown(boundary), " ends with a space");

  struct Delimiter {
    size_t line_start;  // the '-' of "--boundary"
    size_t next;        // just after the delimiter line's line end (where the next part starts)
    bool close;         // "--boundary--"
  };
  // Whether "--boundary" at `dashes` starts a delimiter line: then "--" for the close delimiter, transport padding,
  // a line end (or, after the close delimiter, the end of the body or a lone CR).
  const auto delimiter_at = [&](size_t dashes) -> std::optional<Delimiter> {
    size_t at = dashes + 2 + boundary.size();
    const bool close = body.substr(at, 2) == "--";
    if (close) at += 2;
    at = skip_whitespace(body, at);
    if (at == body.size()) return close ? std::optional<Delimiter>({dashes, at, true}) : std::nullopt;
    if (body[at] == '\n') return Delimiter{dashes, at + 1, close};
    if (body[at] == '\r' && at + 1 < body.size() && body[at + 1] == '\n') return Delimiter{dashes, at + 2, close};
    if (body[at] == '\r' && close) return Delimiter{dashes, body.size(), true};
    return std::nullopt;
  };
  // Boyer-Moore-Horspool on "\n--boundary": each byte is passed once, whatever the body holds.
  const std::string needle = std::string("\n--").append(boundary);
  const std::boyer_moore_horspool_searcher searcher(needle.begin(), needle.end());
  // The next delimiter line whose line feed is at or after `from`.
  const auto next_delimiter = [&](size_t from) -> std::optional<Delimiter> {
    while (from < body.size()) {
      const auto found = std::search(body.begin() + static_cast<std::ptrdiff_t>(from), body.end(), searcher);
      if (found == body.end()) return std::nullopt;
      const auto line_feed = static_cast<size_t>(found - body.begin());
      if (const auto delimiter = delimiter_at(line_feed + 1)) return delimiter;
      from = line_feed + 1;  // "--boundary" then other characters: data
    }
    return std::nullopt;
  };

  const std::string dash_boundary = std::string("--").append(boundary);
  std::optional<Delimiter> delimiter;
  if (body.substr(0, dash_boundary.size()) == dash_boundary) delimiter = delimiter_at(0);
  if (!delimiter) delimiter = next_delimiter(0);
  VP_REQUIRE(delimiter.has_value(), "multipart body: no delimiter line ", shown(dash_boundary),
             " (the body does not use the boundary of its Content-Type, or is empty)");

  std::vector<MultipartPart> parts;
  while (!delimiter->close) {
    const size_t part_start = delimiter->next;
    // From the line feed that ended the previous delimiter line: a delimiter right at the part's start (no CRLF of
    // its own) closes an empty part rather than being taken as data.
    delimiter = next_delimiter(part_start - 1);
    VP_REQUIRE(delimiter.has_value(), "multipart body: no close delimiter ", shown(dash_boundary + "--"),
               " after part ", parts.size(), " (the body is truncated)");
    VP_REQUIRE(parts.size() < limits.max_parts, "multipart body: more than ", limits.max_parts, " parts");
    // The CRLF (or LF) before "--boundary" belongs to the delimiter, not to the part.
    size_t part_end = delimiter->line_start - 1;
    if (part_end > part_start && body[part_end - 1] == '\r') --part_end;
    part_end = std::max(part_end, part_start);
    parts.push_back(parse_part(body.substr(part_start, part_end - part_start), parts.size(), limits));
  }
  return parts;
}

std::vector<std::string_view> dicom_parts_of_stow_request(std::string_view content_type, std::string_view body,
                                                          const MultipartLimits& limits) {
  constexpr std::string_view kExpected = R"(multipart/related; type="application/dicom")";
  const auto parse_or_explain = [&](std::string_view value, const auto&... where) {
    try {
      return parse_media_type(value);
    } catch (const Error& e) {
      fail("STOW-RS request: ", where..., e.what(), " (expected ", kExpected, ")");
    }
  };
  const MediaType media = parse_or_explain(content_type);
  VP_REQUIRE(media.type == "multipart" && media.subtype == "related", "STOW-RS request: Content-Type ",
             shown(content_type), " is not ", kExpected, " (vitpipe stores binary DICOM instances, one per part)");
  const bool typed = media.has_parameter("type");
  if (typed) {
    const MediaType root = parse_or_explain(media.parameter("type"), "the type parameter: ");
    VP_REQUIRE(root.type == "application" && root.subtype == "dicom",
               "STOW-RS request: type=", shown(media.parameter("type")),
               " is not supported: vitpipe takes binary DICOM instances only, not ",
               "metadata and bulk data (expected ", kExpected, ")");
  }
  VP_REQUIRE(!media.parameter("boundary").empty(), "STOW-RS request: Content-Type ", shown(content_type),
             " has no boundary parameter (expected ", kExpected, "; boundary=...)");
  const std::vector<MultipartPart> parts = parse_multipart(body, media.parameter("boundary"), limits);
  VP_REQUIRE(!parts.empty(), "STOW-RS request: the multipart body has no parts (no DICOM instance to store)");

  std::vector<std::string_view> instances;
  for (size_t index = 0; index < parts.size(); ++index) {
    const MultipartPart& part = parts[index];
    const bool has_content_type = std::any_of(part.headers.begin(), part.headers.end(),
                                              [](const auto& header) { return header.first == "content-type"; });
    if (has_content_type) {
      const MediaType type = parse_or_explain(part.header("content-type"), "part ", index, ": ");
      VP_REQUIRE(type.type == "application" && type.subtype == "dicom", "STOW-RS request: part ", index, " is ",
                 type.type, "/", type.subtype, "; vitpipe takes binary DICOM instances only (application/dicom)");
    } else {
      VP_REQUIRE(typed, "STOW-RS request: part ", index, " has no Content-Type and the request no type parameter ",
                 "(expected ", kExpected, ", or Content-Type: application/dicom on each part)");
    }
    // HTTP has no transfer encodings of parts (RFC 7231 A.5): base64 text is not a DICOM file.
    const std::string encoding = lower(part.header("content-transfer-encoding"));
    VP_REQUIRE(encoding.empty() || encoding == "binary" || encoding == "8bit" || encoding == "7bit",
               "STOW-RS request: part ", index, " has Content-Transfer-Encoding ", shown(encoding),
               "; vitpipe takes the instance's bytes as they are (binary)");
    instances.push_back(part.body);
  }
  return instances;
}

}  // namespace vitpipe
