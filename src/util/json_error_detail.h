// Where and why JSON failed to parse, fit for a terminal and for a JSON error reply. nlohmann's what() quotes the bytes
// it read last as they are, so a DEL or non-UTF-8 byte of a broken file would reach the terminal (or make a reply
// invalid UTF-8); here every such byte is written \xNN.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace vitpipe {

// `bytes` with control characters, DEL and bytes that are not part of well-formed UTF-8 written as \xNN.
std::string escape_message_bytes(std::string_view bytes);

// Offset of the first byte of `text` that escape_message_bytes would escape, tab, LF and CR aside (text files may hold
// those); std::string_view::npos when there is none.
size_t first_unprintable_text_byte(std::string_view text);

// "at byte offset K (\xNN): <nlohmann's reason, escaped>" for a parse error of `text` (offset 0-based; "at the end"
// when the text ran out), else ": <reason, escaped>"; callers prefix "<source>: not valid JSON".
std::string json_error_detail(const nlohmann::json::exception& error, std::string_view text);

}  // namespace vitpipe
