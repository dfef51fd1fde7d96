#include "util/stop_request.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <initializer_list>

namespace vitpipe {
namespace {

// Lock-free, so safe to store from a handler, and read by other threads (the comm-deadline watchdog) without a race:
// a volatile sig_atomic_t is signal-safe but not thread-safe.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

// Only write() and _exit() here: the handler may interrupt malloc, oneDNN or MPI on any thread.
void write_line(const char* text) {
  const ssize_t written = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)written;
}

void on_stop_signal(int signal) {
  const int saved_errno = errno;  // the interrupted code may be about to read it
  int none = 0;
  if (g_stop_signal.compare_exchange_strong(none, signal)) {  // the first signal counts
    write_line(signal == SIGINT ? "vitpipe: SIGINT: stopping at the next step with a checkpoint (Ctrl-C again: now)\n"
               : signal == SIGTERM ? "vitpipe: SIGTERM: stopping at the next step with a checkpoint\n"
                                   : "vitpipe: SIGUSR1: stopping at the next step with a checkpoint\n");
  } else if (signal == SIGINT) {
    write_line("vitpipe: SIGINT again: stopping now; the last complete checkpoint stays\n");
    ::_exit(stop_exit_status(SIGINT));
  }
  errno = saved_errno;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking reads and MPI's polls carry on; the flag is read at the step boundary
  for (const int signal : {SIGINT, SIGTERM, SIGUSR1}) sigaction(signal, &action, nullptr);
}

int stop_signal() { return g_stop_signal.load(); }

const char* stop_signal_name(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "a signal";
  }
}

}  // namespace vitpipe
