// vitpipe's reader of multipart bodies (RFC 2046, RFC 2387 multipart/related) and of Content-Type values (RFC 7231
// media types), for DICOMweb STOW-RS (PS3.18): cpp-httplib parses multipart/form-data only. Input is untrusted: every
// failure is a vitpipe::Error, the work is linear in the input, and part bodies are views into the caller's buffer.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vitpipe {

// A parsed Content-Type value: type "/" subtype *( ";" name "=" value ).
struct MediaType {
  std::string type;     // lower-case
  std::string subtype;  // lower-case
  // Names lower-case; values as sent, unquoted (quoted-string escapes resolved), in order.
  std::vector<std::pair<std::string, std::string>> parameters;

  // The value of the parameter named `name` (any case), or "" when there is none.
  std::string parameter(std::string_view name) const;
  // Whether a parameter named `name` (any case) is present (even with an empty quoted value).
  bool has_parameter(std::string_view name) const;
};

// Parses a Content-Type header value. Lenient where that is unambiguous: whitespace around ';' and '=', an empty
// parameter (";;" or a trailing ';'), an unquoted value with separators ("type=application/dicom", as clients write
// it: printable ASCII up to whitespace, ';' or '"'). Refused (vitpipe::Error naming the value and the reason): a
// missing or malformed type or subtype, a parameter without '=' or value, an unterminated quoted string, a repeated
// parameter.
MediaType parse_media_type(std::string_view header_value);

struct MultipartPart {
  // The part's header fields in order; names lower-case, values with surrounding whitespace trimmed.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string_view body;  // into the buffer given to parse_multipart: valid while that buffer lives

  // The value of the first header named `name` (any case), or "" when there is none.
  std::string header(std::string_view name) const;
};

// Longer boundaries than RFC 2046's 70 are accepted up to this (real clients send them), still bounded.
inline constexpr size_t kMaxBoundaryLength = 200;

struct MultipartLimits {
  size_t max_parts = 1000;
  size_t max_header_bytes = 16 * 1024;  // per part: its header lines and the empty line that ends them
};

// The parts of a multipart body delimited by `boundary` (the media type's boundary parameter, 1 to
// kMaxBoundaryLength characters: RFC 2046 says 70, Orthanc 1.10's STOW-RS client sends 73).
// The preamble before the first delimiter and the epilogue after the close delimiter are ignored. Line ends are CRLF
// as RFC 2046 requires; a bare LF is accepted too (a body written with a text editor or curl from a file): the
// boundary is random, so "\n--boundary" never occurs in data by chance. A delimiter line is "--boundary", optional
// spaces or tabs (transport padding), then a line end; a line that starts with "--boundary" but goes on with other
// characters is data (as Python's email parser takes it). A part with no header lines starts with its empty line;
// obsolete folded header lines are unfolded. A body whose first delimiter is the close delimiter gives no parts (RFC
// 2046 wants one at least; dicom_parts_of_stow_request refuses that). Throws vitpipe::Error("multipart body: ...") for
// a missing, overlong or non-printable boundary, no first delimiter, no close delimiter (a truncated body), a malformed
// header line, more than limits.max_parts parts or a part's header section over limits.max_header_bytes.
std::vector<MultipartPart> parse_multipart(std::string_view body, std::string_view boundary,
                                           const MultipartLimits& limits = {});

// The DICOM instances of a STOW-RS request (PS3.18 10.5): checks that `content_type` is multipart/related with
// type="application/dicom" (names and values in any case), and returns the bodies of its parts, in order, as views
// into `body`. vitpipe takes binary instances only: a request of type application/dicom+json or +xml (metadata and
// bulk data) is refused, and so is any part whose Content-Type is not application/dicom (the error names the part's
// index, from 0, and its type). RFC 2387 makes the type parameter required but some clients leave it out: without it
// every part must say application/dicom itself; with it, a part without a Content-Type is taken as application/dicom.
// An empty request (no parts) is refused.
std::vector<std::string_view> dicom_parts_of_stow_request(std::string_view content_type, std::string_view body,
                                                          const MultipartLimits& limits = {});

}  // namespace vitpipe
