// Text values of the DICOM objects vitpipe writes: always UTF-8 (SpecificCharacterSet "ISO_IR 192" where any value
// is not plain ASCII), checked and cut to their value representation's limit. PS3.5 6.2 counts that limit in
// characters, but dciodvfy, pydicom and many PACS databases count bytes, so vitpipe cuts to the limit in bytes, at a
// character boundary: a value that fits both readings.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace vitpipe {

bool is_ascii(std::string_view text);
bool is_valid_utf8(std::string_view text);

// The longest prefix of valid UTF-8 text that has at most `max_bytes` bytes and ends at a character boundary.
std::string utf8_prefix(std::string_view text, size_t max_bytes);

// Refuses what cannot be a single value of a DICOM short or long string (SH, LO): invalid UTF-8, a backslash (the
// value separator) or a control character. `what` names the value in the error.
void require_single_line_dicom_text(std::string_view text, const std::string& what);

}  // namespace vitpipe
