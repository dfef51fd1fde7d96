#include "util/json_error_detail.h"

#include "util/error.h"

namespace vitpipe {
namespace {

std::string hex_byte(unsigned char c) {
  const char* digits = "0123456789abcdef";
  return {'\\', 'x', digits[c >> 4], digits[c & 15]};
}

// Length of the well-formed UTF-8 sequence starting at bytes[i] (RFC 3629: no overlongs, surrogates or code points
// past U+10FFFF), or 0 when there is none.
size_t utf8_sequence_length(std::string_view bytes, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(bytes[k]); };
  const unsigned char lead = at(i);
  size_t length = 0;
  unsigned char low = 0x80, high = 0xbf;  // the range of the second byte
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;
    if (lead == 0xed) high = 0x9f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;
    if (lead == 0xf4) high = 0x8f;
  } else {
    return 0;
  }
  if (i + length > bytes.size() || at(i + 1) < low || at(i + 1) > high) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xbf) return 0;
  }
  return length;
}

}  // namespace

std::string escape_message_bytes(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
    } else if (const size_t length = c >= 0x80 ? utf8_sequence_length(bytes, i) : 0; length > 0) {
      out.append(bytes.substr(i, length));
      i += length;
    } else {
      out += hex_byte(c);
      ++i;
    }
  }
  return out;
}

size_t first_unprintable_text_byte(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c >= 0x20 && c < 0x7f) || c == '\t' || c == '\n' || c == '\r') {
      ++i;
    } else if (const size_t length = c >= 0x80 ? utf8_sequence_length(text, i) : 0; length > 0) {
      i += length;
    } else {
      return i;
    }
  }
  return std::string_view::npos;
}

std::string json_error_detail(const nlohmann::json::exception& error, std::string_view text) {
  std::string reason = error.what();
  // "[json.exception.parse_error.101] parse error at line 1, column 6: ..." -> "line 1, column 6: ..."
  if (reason.rfind("[json.exception.", 0) == 0) {
    if (const size_t end = reason.find("] "); end != std::string::npos) reason.erase(0, end + 2);
  }
  if (reason.rfind("parse error at ", 0) == 0) reason.erase(0, 15);
  reason = escape_message_bytes(reason);
  const auto* parse = dynamic_cast<const nlohmann::json::parse_error*>(&error);
  if (parse == nullptr || parse->byte == 0) return ": " + reason;
  const size_t offset = parse->byte - 1;  // nlohmann counts the bytes read, the offending one included
  if (offset >= text.size()) return concat(" at the end (byte offset ", text.size(), "): ", reason);
  return concat(" at byte offset ", offset, " (", hex_byte(static_cast<unsigned char>(text[offset])), "): ", reason);
}

}  // namespace vitpipe
