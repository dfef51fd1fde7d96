// Log lines go to stderr so stdout stays machine-readable (--json, --format csv).
// Only one process of a distributed job should speak: set_log_enabled(rank == 0).
#pragma once

#include <string>

#include "util/error.h"

namespace vitpipe {

void set_log_enabled(bool enabled);
// Overrides the process-wide switch for the calling thread (ranks running as threads of one process).
void set_thread_log_enabled(bool enabled);
bool log_enabled();
void log_line(const std::string& line);
void warn_line(const std::string& line);  // printed by every process: warnings must not be lost

template <class... Parts>
void info(const Parts&... parts) {
  if (log_enabled()) log_line(concat(parts...));
}

template <class... Parts>
void warn(const Parts&... parts) {
  warn_line(concat(parts...));
}

}  // namespace vitpipe
