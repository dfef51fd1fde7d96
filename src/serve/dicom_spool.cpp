#include "serve/dicom_spool.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "serve/dicom_identifiers.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {

namespace fs = std::filesystem;

void fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VP_REQUIRE(fd >= 0, "cannot open ", path.string(), " to flush it: ", std::strerror(errno));
  int result = ::fsync(fd);
  int fsync_errno = errno;
  ::close(fd);
  VP_REQUIRE(result == 0, "cannot flush ", path.string(), ": ", std::strerror(fsync_errno));
}

namespace {

std::string utc_timestamp_now() {
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::vector<fs::path> dicom_files_oldest_first(const fs::path& dir) {
  struct Entry {
    fs::file_time_type modified;
    fs::path path;
  };
  std::vector<Entry> entries;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    if (!entry.is_regular_file(error) || entry.path().extension() != ".dcm") continue;
    // A file removed between listing and stat (sent meanwhile) is simply skipped.
    fs::file_time_type modified = entry.last_write_time(error);
    if (error) continue;
    entries.push_back({modified, entry.path()});
  }
  VP_REQUIRE(!error, "cannot list ", dir.string(), ": ", error.message());
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.modified != b.modified ? a.modified < b.modified : a.path < b.path;
  });
  std::vector<fs::path> paths;
  paths.reserve(entries.size());
  for (Entry& entry : entries) paths.push_back(std::move(entry.path));
  return paths;
}

void make_private(const fs::path& file) {
  std::error_code error;
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace, error);
  VP_REQUIRE(!error, "cannot make ", file.string(), " private (0600): ", error.message());
}

void rename_durably(const fs::path& from, const fs::path& to) {
  VP_REQUIRE(::rename(from.c_str(), to.c_str()) == 0, "cannot rename ", from.string(), " to ", to.string(), ": ",
             std::strerror(errno));
  fsync_path(to.parent_path());
}

}  // namespace

DicomSpool::DicomSpool(fs::path root, uint64_t dead_letter_max_bytes)
    : root_(std::move(root)), dead_letter_max_bytes_(dead_letter_max_bytes) {
  for (const fs::path& dir : {received_dir(), outbox_dir(), dead_letter_dir(), tmp_dir()}) {
    std::error_code error;
    fs::create_directories(dir, error);
    VP_REQUIRE(!error, "cannot create the DICOM spool directory ", dir.string(), ": ", error.message());
  }
  // Patient data: only this user may list or read it, including what an earlier version left readable.
  for (const fs::path& dir : {root_, received_dir(), outbox_dir(), dead_letter_dir(), tmp_dir()}) {
    std::error_code error;
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, error);
    VP_REQUIRE(!error, "cannot make the DICOM spool directory ", dir.string(), " private (0700): ", error.message());
    if (dir == root_) continue;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, error))
      if (entry.is_regular_file()) make_private(entry.path());
  }
}

void DicomSpool::remove_abandoned_temporaries() const {
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(tmp_dir(), error)) {
    std::error_code ignored;
    fs::remove_all(entry.path(), ignored);
  }
}

fs::path DicomSpool::new_temporary_path() const {
  static std::atomic<uint64_t> counter{0};
  return tmp_dir() / concat(::getpid(), "-", counter.fetch_add(1), ".part");
}

fs::path DicomSpool::commit_into(const fs::path& temporary, const fs::path& dir,
                                 const std::string& sop_instance_uid) const {
  VP_REQUIRE(is_valid_dicom_uid(sop_instance_uid), "SOP Instance UID '", sop_instance_uid,
             "' is not a DICOM UID (digits and dots, at most 64 characters)");
  make_private(temporary);
  fsync_path(temporary);
  fs::path target = dir / (sop_instance_uid + ".dcm");
  rename_durably(temporary, target);
  return target;
}

fs::path DicomSpool::commit_received(const fs::path& temporary, const std::string& sop_instance_uid) const {
  return commit_into(temporary, received_dir(), sop_instance_uid);
}

fs::path DicomSpool::commit_to_outbox(const fs::path& temporary, const std::string& sop_instance_uid) const {
  return commit_into(temporary, outbox_dir(), sop_instance_uid);
}

std::vector<fs::path> DicomSpool::pending_received() const { return dicom_files_oldest_first(received_dir()); }

std::vector<fs::path> DicomSpool::pending_outbox() const { return dicom_files_oldest_first(outbox_dir()); }

void DicomSpool::remove(const fs::path& file) const {
  std::error_code error;
  fs::remove(file, error);
  VP_REQUIRE(!error, "cannot remove ", file.string(), ": ", error.message());
  fsync_path(file.parent_path());
}

fs::path DicomSpool::move_to_dead_letter(const fs::path& outbox_file, const std::string& reason) const {
  fs::path target = dead_letter_dir() / outbox_file.filename();
  fs::path reason_file = target;
  reason_file += ".reason.txt";
  write_text_file_atomically(reason_file, concat(utc_timestamp_now(), " ", reason, "\n"));
  make_private(reason_file);
  make_private(outbox_file);
  rename_durably(outbox_file, target);
  fsync_path(outbox_file.parent_path());  // else the file could reappear in the outbox after a crash
  trim_dead_letter(target);
  return target;
}

void DicomSpool::trim_dead_letter(const fs::path& keep) const {
  struct Entry {
    fs::file_time_type time;
    fs::path path;
    uint64_t bytes;  // with its reason file
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dead_letter_dir(), error)) {
    const fs::path& path = entry.path();
    if (!entry.is_regular_file() || path.extension() == ".txt") continue;
    fs::path reason = path;
    reason += ".reason.txt";
    std::error_code ignored;
    const uint64_t reason_bytes = fs::exists(reason, ignored) ? fs::file_size(reason, ignored) : 0;
    const uint64_t bytes = entry.file_size(ignored) + reason_bytes;
    total += bytes;
    entries.push_back({entry.last_write_time(ignored), path, bytes});
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.time != b.time ? a.time < b.time : a.path < b.path; });
  for (const Entry& entry : entries) {
    if (total <= dead_letter_max_bytes_) break;
    if (entry.path == keep) continue;
    fs::path reason = entry.path;
    reason += ".reason.txt";
    std::error_code ignored;
    fs::remove(entry.path, ignored);
    fs::remove(reason, ignored);
    total -= entry.bytes;
    warn("DICOM spool: dead-letter/ is over its limit of ", dead_letter_max_bytes_, " bytes: dropped ",
         entry.path.filename().string(), " (the oldest)");
  }
  fsync_path(dead_letter_dir());
}

}  // namespace vitpipe
