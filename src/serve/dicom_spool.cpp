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

void rename_durably(const fs::path& from, const fs::path& to) {
  VP_REQUIRE(::rename(from.c_str(), to.c_str()) == 0, "cannot rename ", from.string(), " to ", to.string(), ": ",
             std::strerror(errno));
  fsync_path(to.parent_path());
}

}  // namespace

DicomSpool::DicomSpool(fs::path root) : root_(std::move(root)) {
  for (const fs::path& dir : {received_dir(), outbox_dir(), dead_letter_dir(), tmp_dir()}) {
    std::error_code error;
    fs::create_directories(dir, error);
    VP_REQUIRE(!error, "cannot create the DICOM spool directory ", dir.string(), ": ", error.message());
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
  rename_durably(outbox_file, target);
  fsync_path(outbox_file.parent_path());  // else the file could reappear in the outbox after a crash
  return target;
}

}  // namespace vitpipe
