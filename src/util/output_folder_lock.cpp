#include "util/output_folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"
#include "util/log.h"

namespace vitpipe {

OutputFolderLock::OutputFolderLock(const std::filesystem::path& dir, const std::string& flag,
                                   const std::string& command) {
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  VP_REQUIRE(fd_ >= 0, flag, " ", dir.string(), ": cannot open the folder: ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  const int error = errno;
  if (error == EWOULDBLOCK) {
    ::close(fd_);
    fd_ = -1;
    fail(flag, " ", dir.string(), ": another vitpipe ", command,
         " is writing into this folder now (it holds the folder's lock); wait for it to end, or choose another folder");
  }
  warn(flag, " ", dir.string(), ": cannot lock the folder (", std::strerror(error),
       "); nothing stops a second run from writing into it at the same time");
}

OutputFolderLock::~OutputFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the lock
}

}  // namespace vitpipe
