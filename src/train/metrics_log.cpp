#include "train/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe {

MetricsLog::MetricsLog(const std::filesystem::path& path, int64_t keep_through_step) {
  if (keep_through_step >= 0 && std::filesystem::exists(path)) {
    std::ifstream in(path);
    std::ostringstream kept;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (record.is_discarded()) continue;  // a line cut by a kill
      if (record.contains("step") && record["step"].is_number_integer() &&
          record["step"].get<int64_t>() > keep_through_step) {
        continue;
      }
      kept << line << '\n';
    }
    write_text_file_atomically(path, kept.str());
  } else {
    write_text_file_atomically(path, "");
  }
  file_ = std::fopen(path.c_str(), "a");
  VP_REQUIRE(file_ != nullptr, "cannot open ", path.string(), ": ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  VP_REQUIRE(std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0,
             "cannot write metrics.jsonl: ", std::strerror(errno));
}

}  // namespace vitpipe
