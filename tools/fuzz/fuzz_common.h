// What every libFuzzer harness of tools/fuzz shares: the rule (any input either parses or is refused with a
// vitpipe::Error; anything else, a crash or a sanitizer report is a bug) and a scratch directory for the readers that
// take a path.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace vitpipe::fuzz {

// Runs `body`; a vitpipe::Error is a refusal (fine), any other exception is reported and aborts (a finding).
template <class Body>
void expect_parse_or_refusal(Body&& body) {
  try {
    body();
  } catch (const vitpipe::Error&) {
    // refused with a message: fine
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: an exception other than vitpipe::Error escaped: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fuzz: a non-std exception escaped\n");
    std::abort();
  }
}

// A directory of this process (on tmpfs when there is one), removed at exit.
inline const std::filesystem::path& scratch_directory() {
  static const std::filesystem::path directory = [] {
    std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string pattern = base + "/vitpipe-fuzz-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    static std::filesystem::path remove_at_exit;
    remove_at_exit = pattern;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(remove_at_exit, ignored);
    });
    return std::filesystem::path(pattern);
  }();
  return directory;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::abort();
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits an input into parts at "\n--8<--\n" (harnesses that fill several files from one input).
inline std::vector<std::string_view> split_parts(std::string_view input, size_t max_parts) {
  constexpr std::string_view kCut = "\n--8<--\n";
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t cut = input.find(kCut);
    if (cut == std::string_view::npos) break;
    parts.push_back(input.substr(0, cut));
    input.remove_prefix(cut + kCut.size());
  }
  parts.push_back(input);
  return parts;
}

}  // namespace vitpipe::fuzz
