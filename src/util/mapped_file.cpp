#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"
#include "util/mapping_guard.h"

namespace vitpipe {

std::shared_ptr<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VP_REQUIRE(fd >= 0, "cannot open ", path.string(), ": ", std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    fail(path.string(), ": not a regular file");
  }
  file->size_ = static_cast<size_t>(info.st_size);
  if (file->size_ > 0) {
    void* addr = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail("cannot map ", path.string(), ": ", std::strerror(err));
    }
    file->data_ = static_cast<const std::byte*>(addr);
    watch_mapping(addr, file->size_, path.string());  // a file truncated under us: a clear error, not a SIGBUS
  }
  ::close(fd);
  return file;
}

MappedFile::~MappedFile() {
  unwatch_mapping(data_);
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace vitpipe
