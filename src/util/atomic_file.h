// Files that are either complete or absent: data goes to "<target>.tmp-<pid>", is fsynced, then renamed over the
// target, so a crash (even kill -9) never leaves a half-written checkpoint where a good one was.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>

namespace vitpipe {

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path target);
  ~AtomicFileWriter();  // removes the temporary file unless commit() succeeded
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  size_t bytes_written() const { return written_; }
  void commit();  // fsync, rename over the target, fsync the directory

 private:
  std::filesystem::path target_;
  std::filesystem::path temporary_;
  int fd_ = -1;
  size_t written_ = 0;
  bool committed_ = false;
};

// Convenience for small text files (JSON configs, metrics snapshots).
void write_text_file_atomically(const std::filesystem::path& target, std::string_view text);

std::string read_text_file(const std::filesystem::path& path);

}  // namespace vitpipe
