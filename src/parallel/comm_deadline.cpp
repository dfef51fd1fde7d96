#include "parallel/comm_deadline.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "util/error.h"
#include "util/stop_request.h"

namespace vitpipe {
namespace {

using Clock = std::chrono::steady_clock;

// Never destroyed: the watchdog thread may still read it while the process exits.
struct DeadlineState {
  std::mutex mutex;
  bool configured = false;  // by run_training; other commands take VITPIPE_COMM_TIMEOUT or the default
  double seconds = kDefaultCommTimeoutSeconds;
  std::string failure_log;
  int world_rank = -1;
  std::string host;
  std::thread watchdog;  // joined by end_comm_watchdog(), so no thread of ours outlives the run
  bool watchdog_ending = false;
  bool stop_reported = false;
  bool blocked = false;
  std::string what;
  Clock::time_point since;
};

DeadlineState& state() {
  static auto* instance = new DeadlineState;
  return *instance;
}

std::string hostname_and_addresses() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) std::snprintf(name, sizeof(name), "?");
  std::string identity = name;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return identity;
  int shown = 0;
  for (ifaddrs* entry = list; entry != nullptr && shown < 3; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    if ((entry->ifa_flags & IFF_LOOPBACK) || !(entry->ifa_flags & IFF_UP)) continue;
    char address[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, address, sizeof(address)) == nullptr) continue;
    identity += shown == 0 ? ' ' : ',';
    identity += address;
    ++shown;
  }
  ::freeifaddrs(list);
  return identity;
}

void append_line(const std::string& path, const std::string& line, bool create_directory) {
  if (path.empty()) return;
  std::error_code ignored;
  const std::filesystem::path directory = std::filesystem::path(path).parent_path();
  // A refusal before the run started must leave no output directory behind (nothing was started).
  if (!create_directory && !std::filesystem::is_directory(directory, ignored)) return;
  std::filesystem::create_directories(directory, ignored);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "warning: cannot append to %s\n", path.c_str());
    return;
  }
  // One write of the whole line: with O_APPEND, lines of ranks sharing the file do not interleave.
  const ssize_t written = ::write(fd, line.data(), line.size());
  (void)written;
  ::fsync(fd);
  ::close(fd);
}

// mpirun's daemon ends a job's ranks with SIGTERM and, 1 s later, SIGKILL (odls_base_sigkill_timeout): when a
// daemon loses mpirun (the keepalives of the launch recipe notice a cut link within 25 s, before a 30 s deadline),
// a rank blocked on the lost peer never reaches the step boundary where it would stop (util/stop_request.h). The
// line in the failure log says what it was waiting for. Only a line: the rank itself ends on the trainer's path.
void report_sigterm() {
  DeadlineState& s = state();
  std::string reason = "SIGTERM (mpirun taking the job down, or a scheduler ending it)";
  {
    std::lock_guard lock(s.mutex);
    if (s.stop_reported) return;
    s.stop_reported = true;
    if (s.blocked) {
      reason +=
          concat(" while waiting ", std::chrono::duration<double>(Clock::now() - s.since).count(), " s for ", s.what);
    }
  }
  reason += ": stopping at the next step boundary with a checkpoint";
  // Not made here: mpirun also sends SIGTERM when another rank refused the configuration at the start.
  report_rank_failure(reason, false, /*to_stderr=*/false);
}

// Checks the blocked operation a few times a second; the only thread here that never touches MPI.
void watch() {
  DeadlineState& s = state();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (stop_signal() == SIGTERM) report_sigterm();
    std::string reason;
    {
      std::lock_guard lock(s.mutex);
      if (s.watchdog_ending) return;
      if (!s.blocked || s.seconds <= 0) continue;
      if (std::chrono::duration<double>(Clock::now() - s.since).count() <= s.seconds) continue;
      reason = concat(s.what, " did not complete in ", s.seconds,
                      " s (--comm-timeout): a peer stopped answering (a lost link or host?); this rank exits and the "
                      "job with it; resume from the last checkpoint with --resume");
    }
    report_rank_failure(reason, true);
    std::_Exit(1);
  }
}

}  // namespace

double resolve_comm_timeout(double flag_seconds) {
  if (flag_seconds >= 0) return flag_seconds;
  const char* text = std::getenv("VITPIPE_COMM_TIMEOUT");
  if (text == nullptr || *text == '\0') return kDefaultCommTimeoutSeconds;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  VP_REQUIRE(end != text && *end == '\0' && seconds >= 0 && seconds <= 1e7,
             "VITPIPE_COMM_TIMEOUT: expected seconds in [0, 1e7] (0 = no deadline), got \"", text, "\"");
  return seconds;
}

void configure_comm_deadline(double seconds, const std::string& failure_log) {
  DeadlineState& s = state();
  std::lock_guard lock(s.mutex);
  s.configured = true;
  s.seconds = seconds;
  s.failure_log = failure_log;
}

double comm_timeout_seconds() {
  DeadlineState& s = state();
  std::lock_guard lock(s.mutex);
  return s.seconds;
}

void set_comm_deadline_rank(int world_rank) {
  const std::string host = hostname_and_addresses();
  const double default_seconds = resolve_comm_timeout(-1);
  DeadlineState& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.configured) s.seconds = default_seconds;
  s.world_rank = world_rank;
  s.host = host;
  if (!s.watchdog.joinable()) {
    s.watchdog_ending = false;
    s.watchdog = std::thread(watch);
  }
}

void end_comm_watchdog() {
  DeadlineState& s = state();
  std::thread watchdog;
  {
    std::lock_guard lock(s.mutex);
    s.watchdog_ending = true;
    watchdog = std::move(s.watchdog);
  }
  if (watchdog.joinable()) watchdog.join();
}

const std::string& this_host_identity() {
  DeadlineState& s = state();
  std::lock_guard lock(s.mutex);
  if (s.host.empty()) s.host = hostname_and_addresses();
  return s.host;
}

BlockingCommunication::BlockingCommunication(std::string what) {
  DeadlineState& s = state();
  std::lock_guard lock(s.mutex);
  s.blocked = true;
  s.what = std::move(what);
  s.since = Clock::now();
}

BlockingCommunication::~BlockingCommunication() {
  DeadlineState& s = state();
  std::lock_guard lock(s.mutex);
  s.blocked = false;
}

void report_rank_failure(const std::string& reason, bool create_output_directory, bool to_stderr) {
  std::string host, log;
  int rank = -1;
  {
    DeadlineState& s = state();
    std::lock_guard lock(s.mutex);
    host = s.host.empty() ? hostname_and_addresses() : s.host;
    log = s.failure_log;
    rank = s.world_rank;
  }
  const std::string line = concat("error: rank ", rank, ": ", reason, " [host ", host, "]\n");
  if (to_stderr) {
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }
  append_line(log, line, create_output_directory);
}

}  // namespace vitpipe
