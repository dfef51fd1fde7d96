#include "serve/algorithm_name.h"

#include <fstream>

#include "data/source_fingerprint.h"
#include "util/error.h"

namespace vitpipe {

namespace fs = std::filesystem;

namespace {

// The model card's title: the first "# " heading after the YAML front matter ("---" ... "---"), trimmed.
std::string card_title(const fs::path& readme) {
  std::ifstream in(readme);
  std::string line;
  bool front_matter = false, first = true;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (first && line == "---") {
      front_matter = true;
      first = false;
      continue;
    }
    first = false;
    if (front_matter) {
      front_matter = line != "---";
      continue;
    }
    if (line.starts_with("# ")) {
      const size_t begin = line.find_first_not_of(' ', 2);
      const size_t end = line.find_last_not_of(' ');
      if (begin != std::string::npos) return line.substr(begin, end - begin + 1);
    }
  }
  return {};
}

}  // namespace

std::string algorithm_name(const std::string& reference, const fs::path& model_directory, const fs::path& weights) {
  std::error_code error;
  std::string name;
  if (!fs::exists(reference, error)) {
    name = reference;  // a Hub repo id: its name says what it is
  } else {
    name = card_title(model_directory / "README.md");
    if (name.empty()) {
      const fs::path dir = fs::absolute(model_directory).lexically_normal();
      const fs::path folder = dir.has_filename() ? dir : dir.parent_path();  // "runs/base/model/" has no filename
      name = folder.filename().string();
      // A run's best model lives in RUN/model: "model" alone names nothing.
      if (name == "model" && folder.has_parent_path()) name = folder.parent_path().filename().string() + "/" + name;
    }
  }
  return concat(name, " (sha256 ", sha256_file_hex(weights).substr(0, 12), ")");
}

}  // namespace vitpipe
