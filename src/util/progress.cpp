#include "util/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "util/error.h"
#include "util/log.h"

namespace vitpipe {

bool ProgressBar::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)), total_(total), unit_(std::move(unit)), terminal_(stderr_is_terminal()) {
  start_ = std::chrono::steady_clock::now();
  // A terminal shows the bar at once; a log gets its first line after one interval (a short job: only its last).
  last_draw_ = terminal_ ? start_ - std::chrono::hours(1) : start_;
}

ProgressBar::~ProgressBar() {
  if (!finished_ && terminal_ && log_enabled()) std::fprintf(stderr, "\n");
}

void ProgressBar::update(int64_t done, const std::string& detail) {
  done_ = done;
  auto now = std::chrono::steady_clock::now();
  // Terminals get ~10 redraws per second; logs get a line every 10 s so they stay readable.
  auto interval = terminal_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(10000);
  // In a log, reaching the total writes the closing line (with the elapsed time) once; finish() adds nothing.
  if (!terminal_ && total_ > 0 && done_ >= total_) {
    finish(detail);
    return;
  }
  if (now - last_draw_ < interval && done_ < total_) return;
  last_draw_ = now;
  draw(false, detail);
}

void ProgressBar::finish(const std::string& detail) {
  if (finished_) return;
  draw(true, detail);
  finished_ = true;
}

void ProgressBar::draw(bool final_line, const std::string& detail) {
  if (!log_enabled()) return;
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  std::string eta = (rate > 0 && total_ > done_) ? format_duration(static_cast<double>(total_ - done_) / rate) : "-";
  char rate_text[64];
  std::snprintf(rate_text, sizeof(rate_text), "%.1f %s/s", rate, unit_.c_str());
  // Unit "B": sizes and rates in KiB/MiB/GiB (downloads).
  bool bytes = unit_ == "B";
  if (bytes) std::snprintf(rate_text, sizeof(rate_text), "%s/s", format_bytes(rate).c_str());
  std::string done_text = bytes ? format_bytes(static_cast<double>(done_)) : std::to_string(done_);
  std::string total_text = bytes ? format_bytes(static_cast<double>(total_)) : std::to_string(total_);
  std::string line;
  if (total_ > 0) {
    double fraction = std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
    int width = 24;
    int filled = static_cast<int>(std::lround(fraction * width));
    line = concat(label_, " [", std::string(filled, '#'), std::string(width - filled, '.'), "] ", done_text, "/",
                  total_text, " ", rate_text, " ETA ", eta);
  } else {
    line = concat(label_, " ", done_text, " ", rate_text);
  }
  if (!detail.empty()) line += "  " + detail;
  if (final_line) line += concat("  (", format_duration(elapsed), ")");
  if (terminal_) {
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final_line ? "\n" : "");
    std::fflush(stderr);
  } else {
    log_line(line);
  }
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  long total = std::lround(seconds);
  char text[32];
  if (total >= 3600) {
    std::snprintf(text, sizeof(text), "%ldh%02ldm", total / 3600, (total / 60) % 60);
  } else if (total >= 60) {
    std::snprintf(text, sizeof(text), "%ldm%02lds", total / 60, total % 60);
  } else {
    std::snprintf(text, sizeof(text), "%.1fs", seconds);
  }
  return text;
}

std::string format_seconds(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  char text[32];
  if (seconds < 0.9995) {
    std::snprintf(text, sizeof(text), "%.3g ms", seconds * 1e3);
  } else if (seconds < 999.5) {
    std::snprintf(text, sizeof(text), "%.3g s", seconds);
  } else {
    std::snprintf(text, sizeof(text), "%.0f s", seconds);
  }
  return text;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

}  // namespace vitpipe
