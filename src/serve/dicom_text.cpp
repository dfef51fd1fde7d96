#include "serve/dicom_text.h"

#include "util/error.h"

namespace vitpipe {
namespace {

bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

// Bytes of the UTF-8 sequence starting at `text[i]`, or 0 when it is not a valid (shortest-form, non-surrogate)
// sequence.
size_t sequence_length(std::string_view text, size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  size_t length = 0;
  char32_t code_point = 0;
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) {
    length = 2;
    code_point = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    code_point = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    code_point = lead & 0x07;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    const auto byte = static_cast<unsigned char>(text[i + k]);
    if (!is_continuation(byte)) return 0;
    code_point = (code_point << 6) | (byte & 0x3F);
  }
  static constexpr char32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code_point < kSmallest[length] || code_point > 0x10FFFF) return 0;
  if (code_point >= 0xD800 && code_point <= 0xDFFF) return 0;
  return length;
}

}  // namespace

bool is_ascii(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

bool is_valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t length = sequence_length(text, i);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

std::string utf8_prefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t end = max_bytes;  // text[end] is the first byte left out: back up to the start of its character
  while (end > 0 && is_continuation(static_cast<unsigned char>(text[end]))) --end;
  return std::string(text.substr(0, end));
}

void require_single_line_dicom_text(std::string_view text, const std::string& what) {
  VP_REQUIRE(is_valid_utf8(text), what, " is not valid UTF-8");
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    VP_REQUIRE(byte >= 0x20 && byte != 0x7F && c != '\\', what, " \"", text,
               "\" holds a backslash or a control character, which a DICOM string value cannot");
  }
}

}  // namespace vitpipe
