// A progress line: redrawn in place on a terminal, plain log lines at a modest rate when stderr is a file or pipe
// (one every 10 s, and one closing line when the total is reached or finish() is called, whichever comes first).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace vitpipe {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, std::string unit = "it");
  ~ProgressBar();
  // Sets the absolute position; `detail` is appended (e.g. "loss 0.213").
  void update(int64_t done, const std::string& detail = "");
  void finish(const std::string& detail = "");
  static bool stderr_is_terminal();

 private:
  void draw(bool final_line, const std::string& detail);
  std::string label_;
  int64_t total_;
  std::string unit_;
  int64_t done_ = 0;
  bool terminal_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

std::string format_duration(double seconds);
// A short time to three significant digits, in ms below a second: "10.5 ms", "1.23 s" (a step time, not raw
// "0.0104749 s"); format_duration is for the minutes and hours of a run.
std::string format_seconds(double seconds);
std::string format_bytes(double bytes);

}  // namespace vitpipe
