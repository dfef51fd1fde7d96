// One writer at a time per output folder. Two `train` runs into one --output-dir both ran to the end, each taking
// the other's half-written files for a killed run's leftovers and deleting them, and replacing the other's model,
// metrics and checkpoints. The writer holds an exclusive flock(2) on the folder itself (no lock file to leave behind
// or to count as the folder's content) until it ends; the kernel drops it if the process dies.
#pragma once

#include <filesystem>
#include <string>

namespace vitpipe {

class OutputFolderLock {
 public:
  // Locks `dir`, an existing folder, or throws one line naming it, `flag` and what to do. Where the filesystem has no
  // locks (some network mounts) it warns and goes on unlocked.
  OutputFolderLock(const std::filesystem::path& dir, const std::string& flag, const std::string& command);
  ~OutputFolderLock();
  OutputFolderLock(const OutputFolderLock&) = delete;
  OutputFolderLock& operator=(const OutputFolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace vitpipe
