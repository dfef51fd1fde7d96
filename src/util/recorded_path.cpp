#include "util/recorded_path.h"

namespace vitpipe {

std::string recorded_path(const std::filesystem::path& path) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error).lexically_normal();
  if (error) return path.string();
  if (!absolute.has_filename() && absolute != absolute.root_path()) absolute = absolute.parent_path();  // "mini/"
  return absolute.string();
}

}  // namespace vitpipe
