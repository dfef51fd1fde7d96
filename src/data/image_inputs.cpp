#include "data/image_inputs.h"

#include <algorithm>

#include "data/file_dataset.h"
#include "util/error.h"

namespace vitpipe {

namespace fs = std::filesystem;

ImageInputs::ImageInputs(std::vector<std::string> arguments) : arguments_(std::move(arguments)) {
  for (const auto& a : arguments_) {
    std::error_code ec;
    if (a.starts_with("@")) {
      only_files_ = false;
      // Not only a regular file: a pipe (@/dev/stdin, a FIFO) is a list too.
      VP_REQUIRE(fs::exists(a.substr(1), ec) && !fs::is_directory(a.substr(1), ec), a,
                 ": no such list file (expected @FILE with one image path "
                 "per line)");
    } else if (fs::is_directory(a, ec)) {
      only_files_ = false;
    }
  }
}

void ImageInputs::open_folder(const fs::path& dir) {
  Folder folder;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) folder.entries.push_back(*it);
  VP_REQUIRE(!ec, dir.string(), ": cannot list folder (", ec.message(), ")");
  // Sorted, so the rows come in the same order on every file system.
  std::sort(folder.entries.begin(), folder.entries.end(),
            [](const fs::directory_entry& a, const fs::directory_entry& b) { return a.path() < b.path(); });
  walk_.push_back(std::move(folder));
}

std::optional<std::string> ImageInputs::next() {
  for (;;) {
    while (!walk_.empty()) {
      Folder& top = walk_.back();
      if (top.next == top.entries.size()) {
        walk_.pop_back();
        continue;
      }
      const fs::directory_entry entry = top.entries[top.next++];
      std::error_code ec;
      const std::string name = entry.path().filename().string();
      if (name.starts_with(".")) continue;  // hidden files and folders (.DS_Store, .git) are not inputs
      // A linked folder is not followed: a link back up the tree would never end.
      if (entry.is_directory(ec) && !entry.is_symlink(ec)) {
        open_folder(entry.path());
      } else if (entry.is_regular_file(ec) && is_image_file(entry.path())) {
        return entry.path().string();
      }
    }
    if (list_.is_open()) {
      std::string line;
      if (std::getline(list_, line)) {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
        const size_t start = line.find_first_not_of(" \t");
        if (start == std::string::npos || line[start] == '#') continue;
        return line.substr(start);
      }
      VP_REQUIRE(!list_.bad(), list_name_, ": read error");
      list_.close();
    }
    if (argument_ == arguments_.size()) return std::nullopt;
    const std::string& a = arguments_[argument_++];
    std::error_code ec;
    if (a.starts_with("@")) {
      list_name_ = a.substr(1);
      list_.open(list_name_);
      VP_REQUIRE(list_.is_open(), list_name_, ": cannot open list file");
    } else if (fs::is_directory(a, ec)) {
      open_folder(a);
    } else {
      return a;
    }
  }
}

}  // namespace vitpipe
