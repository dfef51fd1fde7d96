// One model repository in the Hugging Face cache, laid out exactly as huggingface_hub lays it out so Python tools
// and vitpipe share it:
//   <cache>/models--{org}--{name}/blobs/<etag>                 file contents, named by etag (sha256 for LFS files)
//                                 refs/<revision>              the 40-hex commit the branch or tag pointed to
//                                 snapshots/<commit>/<file>    relative symlink -> ../../blobs/<etag>
//                                 .no_exist/<commit>/<file>    empty: the file does not exist at that commit
//   <cache>/.locks/models--{org}--{name}/<etag>.lock           held while a blob downloads
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace vitpipe {

std::string hub_repo_folder_name(const std::string& repo_id);  // "models--google--vit-base-patch16-224"

class HubRepoCache {
 public:
  HubRepoCache(std::filesystem::path cache_dir, std::string repo_id);

  const std::string& repo_id() const { return repo_id_; }
  const std::filesystem::path& folder() const { return folder_; }

  // A 40-hex revision is its own commit; otherwise refs/<revision> names it. Empty when the revision is unknown.
  std::optional<std::string> commit_for(const std::string& revision) const;
  void write_ref(const std::string& revision, const std::string& commit) const;

  std::filesystem::path snapshot_dir(const std::string& commit) const;
  std::filesystem::path blob_path(const std::string& etag) const;
  std::filesystem::path incomplete_path(const std::string& etag) const;  // blob_path + ".incomplete"
  std::filesystem::path lock_path(const std::string& etag) const;

  // snapshots/<commit>/<file> when it exists and its blob is there.
  std::optional<std::filesystem::path> cached_file(const std::string& commit, const std::string& filename) const;
  // Points snapshots/<commit>/<file> at blobs/<etag> (relative symlink, replaced atomically).
  std::filesystem::path link_snapshot_file(const std::string& commit, const std::string& filename,
                                           const std::string& etag) const;

  void mark_missing(const std::string& commit, const std::string& filename) const;
  bool is_marked_missing(const std::string& commit, const std::string& filename) const;

 private:
  std::filesystem::path cache_dir_;
  std::string repo_id_;
  std::filesystem::path folder_;
};

// An exclusive advisory lock (flock) on a file, created if needed; released on destruction. Says on stderr when it
// has to wait for another process.
class FileLock {
 public:
  FileLock(const std::filesystem::path& path, const std::string& waiting_message);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace vitpipe
