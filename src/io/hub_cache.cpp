#include "io/hub_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "io/hub_settings.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {

std::string hub_repo_folder_name(const std::string& repo_id) {
  std::string name = "models--";
  for (char c : repo_id) {
    if (c == '/') {
      name += "--";
    } else {
      name += c;
    }
  }
  return name;
}

HubRepoCache::HubRepoCache(std::filesystem::path cache_dir, std::string repo_id)
    : cache_dir_(std::move(cache_dir)), repo_id_(std::move(repo_id)) {
  VP_REQUIRE(is_valid_repo_id(repo_id_), "'", repo_id_, "' is not a valid Hub repo id");
  folder_ = cache_dir_ / hub_repo_folder_name(repo_id_);
}

std::optional<std::string> HubRepoCache::commit_for(const std::string& revision) const {
  if (is_commit_hash(revision)) return revision;
  if (!is_safe_repo_path(revision)) return std::nullopt;
  std::ifstream in(folder_ / "refs" / revision);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  std::string commit = text.str();
  while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) commit.pop_back();
  if (!is_commit_hash(commit)) {
    warn((folder_ / "refs" / revision).string(), " does not hold a 40-hex commit id; ignoring it");
    return std::nullopt;
  }
  return commit;
}

void HubRepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  VP_REQUIRE(is_safe_repo_path(revision), "revision '", revision, "' cannot name a file under refs/");
  VP_REQUIRE(is_commit_hash(commit), "not a commit id: '", commit, "'");
  std::filesystem::path ref = folder_ / "refs" / revision;
  std::filesystem::create_directories(ref.parent_path());
  if (commit_for(revision) == commit) return;
  write_text_file_atomically(ref, commit);  // no newline, as huggingface_hub writes it
}

std::filesystem::path HubRepoCache::snapshot_dir(const std::string& commit) const {
  return folder_ / "snapshots" / commit;
}

std::filesystem::path HubRepoCache::blob_path(const std::string& etag) const { return folder_ / "blobs" / etag; }

std::filesystem::path HubRepoCache::incomplete_path(const std::string& etag) const {
  return folder_ / "blobs" / (etag + ".incomplete");
}

std::filesystem::path HubRepoCache::lock_path(const std::string& etag) const {
  return cache_dir_ / ".locks" / hub_repo_folder_name(repo_id_) / (etag + ".lock");
}

std::optional<std::filesystem::path> HubRepoCache::cached_file(const std::string& commit,
                                                               const std::string& filename) const {
  if (!is_commit_hash(commit) || !is_safe_repo_path(filename)) return std::nullopt;
  std::filesystem::path pointer = snapshot_dir(commit) / filename;
  std::error_code error;
  if (std::filesystem::is_regular_file(pointer, error)) return pointer;  // follows the symlink to its blob
  return std::nullopt;
}

std::filesystem::path HubRepoCache::link_snapshot_file(const std::string& commit, const std::string& filename,
                                                       const std::string& etag) const {
  VP_REQUIRE(is_safe_repo_path(filename), "unsafe file name in repository ", repo_id_, ": '", filename, "'");
  std::filesystem::path pointer = snapshot_dir(commit) / filename;
  std::filesystem::create_directories(pointer.parent_path());
  std::filesystem::path target = std::filesystem::relative(blob_path(etag), pointer.parent_path());
  // Build the link beside its final name, then rename over it: concurrent processes never see a missing link.
  std::filesystem::path temporary = pointer;
  temporary += concat(".tmp-", ::getpid());
  std::error_code ignored;
  std::filesystem::remove(temporary, ignored);
  std::filesystem::create_symlink(target, temporary);
  if (::rename(temporary.c_str(), pointer.c_str()) != 0) {
    int saved = errno;
    std::filesystem::remove(temporary, ignored);
    fail("cannot create ", pointer.string(), ": ", std::strerror(saved));
  }
  return pointer;
}

void HubRepoCache::mark_missing(const std::string& commit, const std::string& filename) const {
  if (!is_commit_hash(commit) || !is_safe_repo_path(filename)) return;
  std::filesystem::path marker = folder_ / ".no_exist" / commit / filename;
  std::filesystem::create_directories(marker.parent_path());
  std::ofstream touch(marker, std::ios::app);
}

bool HubRepoCache::is_marked_missing(const std::string& commit, const std::string& filename) const {
  if (!is_commit_hash(commit) || !is_safe_repo_path(filename)) return false;
  std::error_code error;
  return std::filesystem::is_regular_file(folder_ / ".no_exist" / commit / filename, error);
}

FileLock::FileLock(const std::filesystem::path& path, const std::string& waiting_message) {
  std::filesystem::create_directories(path.parent_path());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  VP_REQUIRE(fd_ >= 0, "cannot open lock file ", path.string(), ": ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  VP_REQUIRE(errno == EWOULDBLOCK, "cannot lock ", path.string(), ": ", std::strerror(errno));
  info(waiting_message);
  while (::flock(fd_, LOCK_EX) != 0) {
    VP_REQUIRE(errno == EINTR, "cannot lock ", path.string(), ": ", std::strerror(errno));
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace vitpipe
