#include "io/recorded_model_path.h"

#include <cstdlib>
#include <filesystem>

#include "util/error.h"
#include "util/recorded_path.h"

namespace vitpipe {
namespace fs = std::filesystem;

std::string recorded_model_reference(const std::string& reference) {
  fs::path path(reference);
  if (reference.starts_with("~/")) {
    if (const char* home = std::getenv("HOME")) path = fs::path(home) / reference.substr(2);
  }
  std::error_code error;
  if (reference.empty() || !fs::is_directory(path, error)) return reference;  // a repo id (or checked later)
  return recorded_path(path);
}

void require_recorded_base(const std::string& base, const std::string& recorded_in, const std::string& remedy) {
  const fs::path path(base);
  std::error_code error;
  VP_REQUIRE(!path.is_absolute() || fs::is_directory(path, error), recorded_in, ": its base model ", base,
             " is no longer there (moved or deleted?); ", remedy);
}

}  // namespace vitpipe
