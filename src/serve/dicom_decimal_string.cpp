#include "serve/dicom_decimal_string.h"

#include <charconv>
#include <cmath>
#include <system_error>

#include "util/error.h"

namespace vitpipe {
namespace {

// "1.5e-05" -> "1.5e-5", "2e+20" -> "2e20": DS allows both, the short one leaves room for a digit.
std::string compact_exponent(std::string text) {
  const size_t e = text.find('e');
  if (e == std::string::npos) return text;
  std::string mantissa = text.substr(0, e);
  std::string exponent = text.substr(e + 1);
  const bool negative = !exponent.empty() && exponent[0] == '-';
  if (!exponent.empty() && (exponent[0] == '-' || exponent[0] == '+')) exponent.erase(0, 1);
  while (exponent.size() > 1 && exponent[0] == '0') exponent.erase(0, 1);
  return mantissa + "e" + (negative ? "-" : "") + exponent;
}

std::string to_text(double value, std::chars_format format, int precision) {
  char text[64];
  const std::to_chars_result result = std::to_chars(text, text + sizeof text, value, format, precision);
  VP_REQUIRE(result.ec == std::errc(), "cannot format ", value);
  return compact_exponent(std::string(text, result.ptr));
}

}  // namespace

std::string format_decimal_string(double value) {
  VP_REQUIRE(std::isfinite(value), "a DICOM decimal string cannot hold ", value);
  char text[64];
  const std::to_chars_result shortest = std::to_chars(text, text + sizeof text, value);
  VP_REQUIRE(shortest.ec == std::errc(), "cannot format ", value);
  std::string exact = compact_exponent(std::string(text, shortest.ptr));
  if (exact.size() <= kMaxDecimalStringLength) return exact;
  // 17 significant digits always round-trip; take the most that fit, in fixed or exponent notation. to_chars'
  // precision counts significant digits for general but digits after the point for scientific.
  for (int digits = 17; digits >= 1; --digits) {
    for (std::string candidate : {to_text(value, std::chars_format::general, digits),
                                  to_text(value, std::chars_format::scientific, digits - 1)}) {
      if (candidate.size() <= kMaxDecimalStringLength) return candidate;
    }
  }
  fail("cannot write ", value, " in ", kMaxDecimalStringLength, " characters");
}

}  // namespace vitpipe
