// Helpers for tests that compare against a Python reference (scikit-learn, PyTorch, numpy): a scratch folder and
// a way to run tests/train/<script>.py with the system interpreter that has those packages.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace vitpipe::testing {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() /
            ("vitpipe_train_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(std::rand()));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs `python3 tests/train/<script> [<argument>] <dir>`; fails the test (returns false) when it does not exit 0.
inline bool run_reference_script(const std::string& script, const std::filesystem::path& dir,
                                 const std::string& argument = "") {
  const std::string command = std::string("'") + VITPIPE_PYTHON + "' '" + VITPIPE_SOURCE_DIR + "/tests/train/" +
                              script + "' " + (argument.empty() ? "" : "'" + argument + "' ") + "'" + dir.string() +
                              "'";
  const int status = std::system(command.c_str());
  EXPECT_EQ(status, 0) << "reference script failed: " << command;
  return status == 0;
}

inline nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

inline void write_json_file(const std::filesystem::path& path, const nlohmann::json& value) {
  std::ofstream out(path);
  out << value.dump();
}

}  // namespace vitpipe::testing
