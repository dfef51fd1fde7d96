#include "util/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace vitpipe {
namespace {
std::atomic<bool> g_enabled{true};
thread_local int t_enabled = -1;  // -1: follow the process-wide switch
std::mutex g_mutex;
}  // namespace

void set_log_enabled(bool enabled) { g_enabled = enabled; }
void set_thread_log_enabled(bool enabled) { t_enabled = enabled ? 1 : 0; }
bool log_enabled() { return t_enabled >= 0 ? t_enabled == 1 : g_enabled.load(); }

void log_line(const std::string& line) {
  std::lock_guard lock(g_mutex);
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

void warn_line(const std::string& line) {
  std::lock_guard lock(g_mutex);
  std::fprintf(stderr, "warning: %s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace vitpipe
