// The images a command is given: files, folders (walked recursively; a file counts as an image by its extension,
// .png/.jpg/.jpeg/.dcm/.dicom, or by its PNG, JPEG or DICOM signature) and @LIST files (one path per line; blank lines
// and lines starting with '#' are skipped; relative paths are relative to the current directory, as with tar -T).
// Paths come one at a time: memory holds one folder's listing per level being walked and one list line, never the
// whole set, so a folder of a million images streams.
#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace vitpipe {

class ImageInputs {
 public:
  // Refuses, naming it, an @LIST that cannot be opened (before any work is done).
  explicit ImageInputs(std::vector<std::string> arguments);

  // The next path, or nullopt at the end. A named file (argument or list line) is always returned, even when it
  // does not exist: reading it then says why it is unreadable.
  std::optional<std::string> next();

  // True when every argument is a plain file name (no folder, no @LIST): their count is then the whole set.
  bool only_files() const { return only_files_; }
  size_t argument_count() const { return arguments_.size(); }

 private:
  struct Folder {  // one level of a folder walk: its entries sorted by name, and the next to visit
    std::vector<std::filesystem::directory_entry> entries;
    size_t next = 0;
  };
  void open_folder(const std::filesystem::path& dir);

  std::vector<std::string> arguments_;
  size_t argument_ = 0;
  bool only_files_ = true;
  std::ifstream list_;
  std::string list_name_;
  std::vector<Folder> walk_;
};

}  // namespace vitpipe
