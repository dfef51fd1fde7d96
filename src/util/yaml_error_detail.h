// Where and why a YAML file failed to load, fit for a terminal. yaml-cpp quotes what it read in its messages and takes
// control bytes and invalid UTF-8 into scalars as they are (later messages would echo them), so the text is checked
// before parsing and every such byte is written \xNN.
#pragma once

#include <yaml-cpp/exceptions.h>

#include <string>
#include <string_view>

namespace vitpipe {

// " at line L, column C: <yaml-cpp's reason, escaped>" (1-based, from the exception's mark), or ": <reason>" when the
// exception carries no position; callers prefix "<source>: not valid YAML".
std::string yaml_error_detail(const YAML::Exception& error);

// Fails "<source>: not valid YAML at line L, column C (byte offset K, \xNN): ..." at the first control character
// (tab, LF and CR aside), DEL or byte outside well-formed UTF-8: YAML 1.2 allows none of them in a stream.
void require_yaml_text(std::string_view text, const std::string& source);

}  // namespace vitpipe
