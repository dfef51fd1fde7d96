// Text values of the DICOM objects vitpipe writes: always UTF-8 (SpecificCharacterSet "ISO_IR 192" where any value
// is not plain ASCII), checked and cut to their value representation's limit in characters, not bytes (PS3.5 6.2).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace vitpipe {

bool is_ascii(std::string_view text);
bool is_valid_utf8(std::string_view text);

// Code points of valid UTF-8 text.
size_t utf8_length(std::string_view text);

// The first `max_characters` code points of valid UTF-8 text (the whole text when it is not longer).
std::string utf8_prefix(std::string_view text, size_t max_characters);

// Refuses what cannot be a single value of a DICOM short or long string (SH, LO): invalid UTF-8, a backslash (the
// value separator) or a control character. `what` names the value in the error.
void require_single_line_dicom_text(std::string_view text, const std::string& what);

}  // namespace vitpipe
