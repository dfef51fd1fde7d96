#include "util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace vitpipe {

AtomicFileWriter::AtomicFileWriter(std::filesystem::path target) : target_(std::move(target)) {
  // Named plainly: the rename at the end failed with "cannot rename OUT.tmp-PID to OUT: Is a
  // directory", or the temporary's open with a name the user never typed.
  std::error_code error;  // a folder that cannot be looked at is left to open() to report
  VP_REQUIRE(!std::filesystem::is_directory(target_, error), target_.string(),
             ": is a folder (expected a file to write)");
  const std::filesystem::path parent = std::filesystem::absolute(target_, error).parent_path();
  VP_REQUIRE(parent.empty() || std::filesystem::exists(parent, error) || error, "cannot write ", target_.string(),
             ": its folder ", parent.string(), " does not exist");
  temporary_ = target_;
  temporary_ += concat(".tmp-", ::getpid());
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  VP_REQUIRE(fd_ >= 0, "cannot create ", temporary_.string(), ": ", std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) {
    std::error_code ignored;
    std::filesystem::remove(temporary_, ignored);
  }
}

void AtomicFileWriter::write(const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd_, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    VP_REQUIRE(n > 0, "cannot write ", temporary_.string(), ": ", std::strerror(errno));
    bytes += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  VP_REQUIRE(::fsync(fd_) == 0, "cannot flush ", temporary_.string(), ": ", std::strerror(errno));
  VP_REQUIRE(::close(fd_) == 0, "cannot close ", temporary_.string(), ": ", std::strerror(errno));
  fd_ = -1;
  VP_REQUIRE(::rename(temporary_.c_str(), target_.c_str()) == 0, "cannot rename ", temporary_.string(), " to ",
             target_.string(), ": ", std::strerror(errno));
  committed_ = true;
  // The rename is only durable once the directory entry is on disk.
  std::filesystem::path dir = target_.parent_path().empty() ? "." : target_.parent_path();
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void write_text_file_atomically(const std::filesystem::path& target, std::string_view text) {
  AtomicFileWriter writer(target);
  writer.write(text);
  writer.commit();
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  VP_REQUIRE(in, "cannot open ", path.string(), ": ", std::strerror(errno));
  std::ostringstream contents;
  contents << in.rdbuf();
  VP_REQUIRE(!in.bad(), "cannot read ", path.string());
  return contents.str();
}

}  // namespace vitpipe
