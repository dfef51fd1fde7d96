#include "util/yaml_error_detail.h"

#include <algorithm>

#include "util/error.h"
#include "util/json_error_detail.h"

namespace vitpipe {

std::string yaml_error_detail(const YAML::Exception& error) {
  const std::string reason = escape_message_bytes(error.msg);
  if (error.mark.is_null()) return ": " + reason;
  return concat(" at line ", error.mark.line + 1, ", column ", error.mark.column + 1, ": ", reason);
}

void require_yaml_text(std::string_view text, const std::string& source) {
  const size_t offset = first_unprintable_text_byte(text);
  if (offset == std::string_view::npos) return;
  const std::string_view before = text.substr(0, offset);
  const size_t line = std::count(before.begin(), before.end(), '\n') + 1;
  const size_t line_start = before.rfind('\n');
  const size_t column = line_start == std::string_view::npos ? offset + 1 : offset - line_start;
  fail(source, ": not valid YAML at line ", line, ", column ", column, " (byte offset ", offset, ", ",
       escape_message_bytes(text.substr(offset, 1)),
       "): expected UTF-8 text without control characters (tab, newline and carriage return aside)");
}

}  // namespace vitpipe
