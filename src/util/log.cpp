#include "util/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace vitpipe {
namespace {
std::atomic<bool> g_enabled{true};
std::mutex g_mutex;
}  // namespace

void set_log_enabled(bool enabled) { g_enabled = enabled; }
bool log_enabled() { return g_enabled; }

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
