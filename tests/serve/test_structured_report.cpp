// The numbers and codes of the findings SR: probabilities as DICOM decimal strings (at most 16 characters, as
// precise as they allow) and the labels' code values (stable, at most 16 characters, distinct).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <string>

#include "serve/dicom_decimal_string.h"
#include "serve/dicom_text.h"
#include "serve/structured_report.h"
#include "util/error.h"

namespace vitpipe {
namespace {

double parse(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  EXPECT_EQ(*end, '\0') << text;
  return value;
}

bool is_decimal_string(const std::string& text) {
  for (const char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '+' && c != 'e' && c != 'E')
      return false;
  }
  return !text.empty();
}

TEST(DecimalString, ExactWhereTheShortestFormFits) {
  EXPECT_EQ(format_decimal_string(0), "0");
  EXPECT_EQ(format_decimal_string(1), "1");
  EXPECT_EQ(format_decimal_string(0.5), "0.5");
  EXPECT_EQ(format_decimal_string(1e-20), "1e-20");
  EXPECT_EQ(format_decimal_string(0.1), "0.1");
  EXPECT_EQ(parse(format_decimal_string(0.25431)), 0.25431);
}

TEST(DecimalString, AtMost16CharactersAndAsPreciseAsTheyAllow) {
  // 1e-12 relative where 16 characters hold 13 significant digits; 5e-12 where an exponent takes 4 of them.
  const struct {
    double value;
    double relative_tolerance;
  } cases[] = {{0.123456789012345678, 1e-12},
               {0.9999999999999999, 1e-12},
               {1.0 / 3.0, 1e-12},
               {2.0 / 3.0, 1e-12},
               {0.000123456789012345, 1e-11},
               {1.2345678901234567e-5, 1e-11},
               {9.87654321098765e-300, 1e-10},
               {0.99999999999, 1e-12},
               {4.9406564584124654e-324, 1e-3},
               {-0.123456789012345678, 1e-12},
               {1e-7, 0},
               {123456789.123456789, 1e-12}};
  for (const auto& [value, tolerance] : cases) {
    const std::string text = format_decimal_string(value);
    EXPECT_LE(text.size(), kMaxDecimalStringLength) << value << " -> " << text;
    EXPECT_TRUE(is_decimal_string(text)) << text;
    EXPECT_LE(std::abs(parse(text) - value), tolerance * std::abs(value)) << value << " -> " << text;
  }
  // 16 characters hold 14 significant digits of 0.1234...: all of them are used.
  EXPECT_EQ(format_decimal_string(0.123456789012345678), "0.12345678901235");
  EXPECT_EQ(format_decimal_string(1.2345678901234567e-5), "1.23456789012e-5");
}

TEST(DecimalString, RefusesWhatIsNotFinite) {
  EXPECT_THROW(format_decimal_string(std::nan("")), Error);
  EXPECT_THROW(format_decimal_string(INFINITY), Error);
}

TEST(FindingCodeValue, StableShortAndDistinct) {
  // Pinned: a PACS query by code must find the same label in every report, from any model or version.
  EXPECT_EQ(finding_code_value("Effusion"), "VP493D1459011EA7");  // "VP" + SHA-256("Effusion")[:14]
  const std::string effusion = finding_code_value("Effusion");
  EXPECT_EQ(effusion.size(), 16u);
  EXPECT_EQ(effusion.substr(0, 2), "VP");
  std::set<std::string> codes;
  const char* labels[] = {"Atelectasis", "Cardiomegaly", "Effusion",           "Infiltration",  "Mass",
                          "Nodule",      "Pneumonia",    "Pneumothorax",       "Consolidation", "Edema",
                          "Emphysema",   "Fibrosis",     "Pleural_Thickening", "Hernia",        "No Finding",
                          "Épanchement", "effusion",     "Effusion "};
  for (const char* label : labels) {
    const std::string code = finding_code_value(label);
    EXPECT_LE(code.size(), 16u) << label;
    for (const char c : code) EXPECT_TRUE(std::isupper(static_cast<unsigned char>(c)) || std::isdigit(c)) << code;
    EXPECT_TRUE(codes.insert(code).second) << label << " shares the code " << code;
  }
  // Labels that agree on their first 64 bytes (their cut code meanings) still get distinct codes.
  const std::string stem(64, 'x');
  EXPECT_NE(finding_code_value(stem + "a"), finding_code_value(stem + "b"));
}

TEST(DicomText, CutsAtCharacterBoundaries) {
  const std::string e_acute = "\xC3\xA9";
  std::string label = "x";
  for (int i = 0; i < 70; ++i) label += e_acute;
  const std::string cut = utf8_prefix(label, 64);
  EXPECT_EQ(cut.size(), 63u);  // "x" and 31 two-byte characters: the 32nd would end at byte 65
  EXPECT_TRUE(is_valid_utf8(cut));
  EXPECT_EQ(utf8_prefix(label.substr(1), 64).size(), 64u);
  EXPECT_EQ(utf8_prefix("short", 64), "short");
  EXPECT_FALSE(is_valid_utf8("\xC3"));
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));  // overlong '/'
  EXPECT_THROW(require_single_line_dicom_text("a\\b", "label"), Error);
  EXPECT_THROW(require_single_line_dicom_text("a\nb", "label"), Error);
  EXPECT_NO_THROW(require_single_line_dicom_text("Épanchement pleural", "label"));
}

}  // namespace
}  // namespace vitpipe
