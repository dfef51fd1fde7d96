// A path as a file that outlives the command records it: absolute and normalised ("runs/../mini/" ->
// "/home/me/mini"), so it means the same from any working directory.
#pragma once

#include <filesystem>
#include <string>

namespace vitpipe {

// `path` made absolute against the working directory, lexically normalised, without a trailing separator; `path`
// itself when the working directory cannot be read.
std::string recorded_path(const std::filesystem::path& path);

}  // namespace vitpipe
