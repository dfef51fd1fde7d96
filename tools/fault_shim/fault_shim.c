// An LD_PRELOAD shim that makes the disk fail under a running vitpipe, for the fault tests (tests/faults/): writes
// to files whose path contains VITPIPE_FAULT_PATH fail with ENOSPC or EIO once VITPIPE_FAULT_AFTER_BYTES bytes have
// gone to such files (the disk filling up, or dying, in the middle of a checkpoint), or their fsync / rename fails.
//
//   VITPIPE_FAULT_PATH         substring of the absolute path of the files to fail (required; unset = no faults);
//                              ending in '$' it must end the path ("/checkpoints/latest$")
//   VITPIPE_FAULT_OP           write (default: write, pwrite, writev), fsync (fsync, fdatasync) or rename (rename,
//                              renameat, renameat2 whose source or target matches)
//   VITPIPE_FAULT_AFTER_BYTES  write: bytes that still succeed (default 0); a write that crosses it is cut short
//                              there (as a filling disk does), the next one fails
//   VITPIPE_FAULT_AFTER_CALLS  fsync, rename: matching calls that still succeed (default 0)
//   VITPIPE_FAULT_ERRNO        ENOSPC (default) or EIO
//   VITPIPE_FAULT_OP=delay     no failure: each matching fsync / fdatasync first sleeps VITPIPE_FAULT_DELAY_MS
//                              (default 500) after printing "fault_shim: delay on fsync of <path>", so a test can
//                              act while a file is being written (a second signal in the middle of a checkpoint)
//
// Each injected fault prints one line "fault_shim: <errno name> on <call> of <path>" on stderr, so a test can tell
// that the fault really happened. Only calls through the dynamic linker are seen (vitpipe's own write/fsync/rename
// calls and those of libstdc++'s filesystem library).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum fault_op { op_none, op_write, op_fsync, op_rename, op_delay };

static enum fault_op configured_op = op_none;
static const char* fault_path = NULL;
static int fault_errno = ENOSPC;
static long delay_ms = 500;          // op_delay
static long long budget = 0;         // bytes that may still be written to matching files
static long long calls_allowed = 0;  // fsync / rename calls that may still succeed
static atomic_llong written;
static atomic_llong calls;
static size_t pattern_length = 0;
static int anchored = 0;  // the pattern must end the path

__attribute__((constructor)) static void read_configuration(void) {
  fault_path = getenv("VITPIPE_FAULT_PATH");
  if (fault_path == NULL || fault_path[0] == '\0') return;
  const char* op = getenv("VITPIPE_FAULT_OP");
  configured_op = (op == NULL || strcmp(op, "write") == 0) ? op_write
                  : strcmp(op, "fsync") == 0               ? op_fsync
                  : strcmp(op, "rename") == 0              ? op_rename
                  : strcmp(op, "delay") == 0               ? op_delay
                                                           : op_none;
  const char* delay = getenv("VITPIPE_FAULT_DELAY_MS");
  if (delay != NULL) delay_ms = atol(delay);
  const char* after = getenv("VITPIPE_FAULT_AFTER_BYTES");
  budget = after != NULL ? atoll(after) : 0;
  const char* after_calls = getenv("VITPIPE_FAULT_AFTER_CALLS");
  calls_allowed = after_calls != NULL ? atoll(after_calls) : 0;
  pattern_length = strlen(fault_path);
  anchored = fault_path[pattern_length - 1] == '$';
  if (anchored) --pattern_length;
  const char* code = getenv("VITPIPE_FAULT_ERRNO");
  fault_errno = (code != NULL && strcmp(code, "EIO") == 0) ? EIO : ENOSPC;
  if (configured_op == op_none) {
    fprintf(stderr, "fault_shim: unknown VITPIPE_FAULT_OP '%s' (write, fsync, rename or delay)\n", op);
    abort();
  }
}

static void* next_symbol(const char* name) {
  void* symbol = dlsym(RTLD_NEXT, name);
  if (symbol == NULL) {
    fprintf(stderr, "fault_shim: no next %s\n", name);
    abort();
  }
  return symbol;
}

static int path_matches(const char* path) {
  if (anchored) {
    const size_t n = strlen(path);
    return n >= pattern_length && strncmp(path + n - pattern_length, fault_path, pattern_length) == 0;
  }
  return strstr(path, fault_path) != NULL;
}

// The next matching fsync / rename: fails once VITPIPE_FAULT_AFTER_CALLS of them have succeeded.
static int call_fails(void) { return atomic_fetch_add(&calls, 1) >= calls_allowed; }

// The file behind `fd`, when it matches VITPIPE_FAULT_PATH.
static int fd_matches(int fd, char* path, size_t size) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, size - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return path_matches(path);
}

static void report(const char* call, const char* path) {
  char line[4200];
  int n =
      snprintf(line, sizeof line, "fault_shim: %s on %s of %s\n", fault_errno == EIO ? "EIO" : "ENOSPC", call, path);
  ssize_t (*real_write)(int, const void*, size_t) = next_symbol("write");
  if (n > 0) (void)real_write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

// How many of `size` bytes a write to `fd` may pass on: all of them (no fault here), fewer (the disk fills up
// within this write), or -1 with errno set.
static ssize_t allowed_bytes(int fd, size_t size, const char* call) {
  char path[4096];
  if (configured_op != op_write || size == 0 || !fd_matches(fd, path, sizeof path)) return (ssize_t)size;
  long long before = atomic_fetch_add(&written, (long long)size);
  if (before + (long long)size <= budget) return (ssize_t)size;
  if (before < budget) return (ssize_t)(budget - before);  // a short write, as on a disk that just filled up
  report(call, path);
  errno = fault_errno;
  return -1;
}

ssize_t write(int fd, const void* data, size_t size) {
  static ssize_t (*real)(int, const void*, size_t) = NULL;
  if (real == NULL) real = next_symbol("write");
  ssize_t allowed = allowed_bytes(fd, size, "write");
  return allowed < 0 ? -1 : real(fd, data, (size_t)allowed);
}

ssize_t pwrite(int fd, const void* data, size_t size, off_t offset) {
  static ssize_t (*real)(int, const void*, size_t, off_t) = NULL;
  if (real == NULL) real = next_symbol("pwrite");
  ssize_t allowed = allowed_bytes(fd, size, "pwrite");
  return allowed < 0 ? -1 : real(fd, data, (size_t)allowed, offset);
}

ssize_t pwrite64(int fd, const void* data, size_t size, off_t offset) { return pwrite(fd, data, size, offset); }

ssize_t writev(int fd, const struct iovec* iov, int count) {
  static ssize_t (*real)(int, const struct iovec*, int) = NULL;
  if (real == NULL) real = next_symbol("writev");
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += iov[i].iov_len;
  ssize_t allowed = allowed_bytes(fd, total, "writev");
  if (allowed < 0) return -1;
  if ((size_t)allowed == total) return real(fd, iov, count);
  // Cut short: pass on the first `allowed` bytes only.
  struct iovec cut[64];
  int n = 0;
  size_t left = (size_t)allowed;
  for (int i = 0; i < count && n < 64 && left > 0; ++i) {
    cut[n] = iov[i];
    if (cut[n].iov_len > left) cut[n].iov_len = left;
    left -= cut[n].iov_len;
    ++n;
  }
  return real(fd, cut, n);
}

static int fsync_fault(int fd, const char* call) {
  char path[4096];
  if (configured_op == op_delay && fd_matches(fd, path, sizeof path)) {
    char line[4200];
    int n = snprintf(line, sizeof line, "fault_shim: delay on %s of %s\n", call, path);
    ssize_t (*real_write)(int, const void*, size_t) = next_symbol("write");
    if (n > 0) (void)real_write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    struct timespec pause = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
    while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {
    }
    return 0;
  }
  if (configured_op != op_fsync || !fd_matches(fd, path, sizeof path) || !call_fails()) return 0;
  report(call, path);
  errno = fault_errno;
  return -1;
}

int fsync(int fd) {
  static int (*real)(int) = NULL;
  if (real == NULL) real = next_symbol("fsync");
  return fsync_fault(fd, "fsync") < 0 ? -1 : real(fd);
}

int fdatasync(int fd) {
  static int (*real)(int) = NULL;
  if (real == NULL) real = next_symbol("fdatasync");
  return fsync_fault(fd, "fdatasync") < 0 ? -1 : real(fd);
}

static int rename_fault(const char* from, const char* to, const char* call) {
  if (configured_op != op_rename) return 0;
  const char* path = path_matches(to) ? to : path_matches(from) ? from : NULL;
  if (path == NULL || !call_fails()) return 0;
  report(call, path);
  errno = fault_errno;
  return -1;
}

int rename(const char* from, const char* to) {
  static int (*real)(const char*, const char*) = NULL;
  if (real == NULL) real = next_symbol("rename");
  return rename_fault(from, to, "rename") < 0 ? -1 : real(from, to);
}

int renameat(int from_dir, const char* from, int to_dir, const char* to) {
  static int (*real)(int, const char*, int, const char*) = NULL;
  if (real == NULL) real = next_symbol("renameat");
  return rename_fault(from, to, "renameat") < 0 ? -1 : real(from_dir, from, to_dir, to);
}

int renameat2(int from_dir, const char* from, int to_dir, const char* to, unsigned int flags) {
  static int (*real)(int, const char*, int, const char*, unsigned int) = NULL;
  if (real == NULL) real = next_symbol("renameat2");
  return rename_fault(from, to, "renameat2") < 0 ? -1 : real(from_dir, from, to_dir, to, flags);
}
