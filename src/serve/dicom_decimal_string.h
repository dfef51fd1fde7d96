// Numbers as DICOM Decimal Strings (DS, PS3.5 6.2): at most 16 characters. DCMTK writes an empty value, without
// failing, when given a longer one, so every number vitpipe writes as DS goes through here.
#pragma once

#include <string>

namespace vitpipe {

inline constexpr size_t kMaxDecimalStringLength = 16;

// The shortest text that reads back as exactly `value` when that fits in 16 characters; otherwise the most
// significant digits that fit (fixed or exponent notation, whichever keeps more; the exponent without '+' or leading
// zeros). Throws vitpipe::Error for a value that is not finite.
std::string format_decimal_string(double value);

}  // namespace vitpipe
