// metrics.jsonl: one JSON object per logged training step and per evaluation, appended and flushed line by line so
// a killed run keeps what it logged. A resumed run first drops the lines of steps after its checkpoint (they are
// recomputed), so the file reads as one uninterrupted run.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace vitpipe {

class MetricsLog {
 public:
  // `keep_through_step` >= 0: drop existing lines whose "step" is larger (resume); < 0: start a new file.
  MetricsLog(const std::filesystem::path& path, int64_t keep_through_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const nlohmann::json& record);

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace vitpipe
