// The DICOM node's spool directory: what a PACS sent and what goes back to it, kept on disk so that nothing
// acknowledged or produced is lost when the process dies.
//
//   received/     instances acknowledged to the sender (C-STORE success), waiting for the model: <SOPInstanceUID>.dcm
//   outbox/       results waiting to be sent back by C-STORE: <name>.dcm
//   dead-letter/  results a PACS refused permanently, each with <name>.reason.txt saying why and when
//   tmp/          files being written; renamed into received/ or outbox/ once complete and fsynced
//
// Every file enters received/ or outbox/ by rename from tmp/ (same file system) after an fsync, and the directory is
// fsynced after the rename, so a listed file is always complete. Methods only touch the file system: one DicomSpool
// (or copies of it) may be used from several threads. One process per spool directory.
//
// It holds patient data: the directories are 0700 and every file 0600, whatever the umask, and dead-letter/ is kept
// under a size limit by dropping its oldest entries (each drop logged).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace vitpipe {

class DicomSpool {
 public:
  // Creates the directories if missing (0700; what they already hold is made 0600). Throws vitpipe::Error naming
  // the directory that cannot be created.
  explicit DicomSpool(std::filesystem::path root, uint64_t dead_letter_max_bytes = uint64_t{1} << 30);

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path received_dir() const { return root_ / "received"; }
  std::filesystem::path outbox_dir() const { return root_ / "outbox"; }
  std::filesystem::path dead_letter_dir() const { return root_ / "dead-letter"; }
  std::filesystem::path tmp_dir() const { return root_ / "tmp"; }

  // Removes what tmp/ holds: files whose writer died before committing them (never acknowledged, never queued).
  // Call once at start, before anything writes to the spool.
  void remove_abandoned_temporaries() const;

  // A path in tmp/ that no other caller gets (thread-safe); the caller writes the file there, then commits it.
  std::filesystem::path new_temporary_path() const;

  // fsync `temporary` (a file in tmp/), rename it to received/<sop_instance_uid>.dcm (replacing an earlier copy of
  // the same instance) and fsync received/. Returns the final path. Throws vitpipe::Error if the UID is not valid
  // or the file cannot be flushed or renamed.
  std::filesystem::path commit_received(const std::filesystem::path& temporary,
                                        const std::string& sop_instance_uid) const;
  // The same into outbox/<sop_instance_uid>.dcm: the SR writer's way of queueing a result for the sender.
  std::filesystem::path commit_to_outbox(const std::filesystem::path& temporary,
                                         const std::string& sop_instance_uid) const;

  // Pending work at start (and whenever the sender scans): *.dcm files, oldest first (by modification time, then
  // name), so work resumes in arrival order.
  std::vector<std::filesystem::path> pending_received() const;
  std::vector<std::filesystem::path> pending_outbox() const;

  // Removes a processed received/ file or a sent outbox/ file, and fsyncs its directory.
  void remove(const std::filesystem::path& file) const;

  // Moves an outbox/ file to dead-letter/ and writes dead-letter/<name>.reason.txt ("<UTC time> <reason>"). The
  // reason file is written first, so a dead-letter file never lacks one. Then the oldest entries go while
  // dead-letter/ holds more than its limit (the newest always stays). Returns the dead-letter path.
  std::filesystem::path move_to_dead_letter(const std::filesystem::path& outbox_file, const std::string& reason) const;

 private:
  std::filesystem::path commit_into(const std::filesystem::path& temporary, const std::filesystem::path& dir,
                                    const std::string& sop_instance_uid) const;

  void trim_dead_letter(const std::filesystem::path& keep) const;

  std::filesystem::path root_;
  uint64_t dead_letter_max_bytes_;
};

// fsync a file's data or a directory's entries; throws vitpipe::Error naming the path on failure.
void fsync_path(const std::filesystem::path& path);

}  // namespace vitpipe
