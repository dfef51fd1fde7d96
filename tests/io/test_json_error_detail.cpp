// JSON parse errors name the file, the byte offset and the offending byte as \xNN; no raw control or non-UTF-8 byte
// of the broken file reaches the message (nlohmann's what() quotes the bytes it read last as they are).
#include <gtest/gtest.h>

#include <string>

#include "io/hf_config.h"
#include "io/preprocessor_config.h"
#include "util/error.h"
#include "util/json_error_detail.h"

namespace vitpipe {
namespace {

// True when every byte is printable ASCII or part of well-formed UTF-8 (what Python's strict decode accepts).
bool clean_text(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) return false;
  }
  return escape_message_bytes(text) == text;
}

std::string config_error(const std::string& text) {
  try {
    parse_hf_config_text(text, "models/broken/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << text;
  return {};
}

TEST(JsonErrorDetail, EscapesControlDelAndMalformedUtf8ButKeepsWellFormedText) {
  EXPECT_EQ(escape_message_bytes("plain {\"a\": 1}"), "plain {\"a\": 1}");
  EXPECT_EQ(escape_message_bytes("Herzvergr\xc3\xb6\xc3\x9f"
                                 "erung \xe2\x82\xac \xf0\x9f\x98\x80"),
            "Herzvergr\xc3\xb6\xc3\x9f"
            "erung \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(escape_message_bytes(std::string("a\x01\x1b[31m\x7f\n", 9)), "a\\x01\\x1b[31m\\x7f\\x0a");
  EXPECT_EQ(escape_message_bytes(std::string("\0", 1)), "\\x00");
  EXPECT_EQ(escape_message_bytes("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(escape_message_bytes("caf\xc3"), "caf\\xc3");                       // cut short
  EXPECT_EQ(escape_message_bytes("\xc3(x"), "\\xc3(x");                         // no continuation byte
  EXPECT_EQ(escape_message_bytes("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(escape_message_bytes("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a UTF-16 surrogate
  EXPECT_EQ(escape_message_bytes("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
}

TEST(JsonErrorDetail, ConfigWithANonUtf8ByteNamesFileOffsetAndByteEscaped) {
  const std::string text = "{\"hidden_size\": 768,\n \"label\": \"caf\xff\"}";
  const std::string message = config_error(text);
  const std::string where = "at byte offset " + std::to_string(text.find('\xff')) + " (\\xff)";
  EXPECT_NE(message.find("models/broken/config.json: not valid JSON " + where), std::string::npos) << message;
  EXPECT_TRUE(clean_text(message)) << message;
  EXPECT_EQ(message.find("[json.exception"), std::string::npos) << message;
}

TEST(JsonErrorDetail, ControlAndDelBytesAreEscapedToo) {
  for (const char bad : {'\x01', '\x1b', '\x7f', '\x80'}) {
    const std::string text = std::string("{\"size\": ") + bad + "}";
    std::string message;
    try {
      parse_preprocessor_config_text(text, "preprocessor_config.json");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("preprocessor_config.json: not valid JSON at byte offset 9 ("), std::string::npos)
        << message;
    EXPECT_NE(message.find(escape_message_bytes(std::string(1, bad))), std::string::npos) << message;
    EXPECT_TRUE(clean_text(message)) << message;
  }
}

TEST(JsonErrorDetail, TextThatEndsEarlySaysSo) {
  const std::string message = config_error("{\"hidden_size\": 768,");
  EXPECT_NE(message.find("config.json: not valid JSON at the end (byte offset 20)"), std::string::npos) << message;
}

}  // namespace
}  // namespace vitpipe
