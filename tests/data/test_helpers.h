// Shared by the data tests: the bundled sample, temporary folders, expecting an error message.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "util/error.h"

namespace vitpipe::testing {

namespace fs = std::filesystem;

inline fs::path source_dir() { return fs::path(VITPIPE_SOURCE_DIR); }
inline fs::path sample_dir() { return source_dir() / "data" / "chestxray14-sample"; }
inline fs::path fixtures_dir() { return source_dir() / "tests" / "fixtures" / "chestxray14"; }

// A fresh folder removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("vitpipe-data-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

inline void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// A copy of the bundled sample (images symlinked): tests may edit its label files.
inline void copy_sample(const fs::path& to) {
  fs::create_directories(to / "images");
  for (const char* name : {"Data_Entry_2017_v2020.csv", "train_val_list.txt", "test_list.txt"})
    fs::copy_file(sample_dir() / name, to / name);
  for (const auto& e : fs::directory_iterator(sample_dir() / "images"))
    fs::create_symlink(e.path(), to / "images" / e.path().filename());
}

// Runs `body`, expects a vitpipe::Error whose message contains every one of `parts`.
template <class Body>
void expect_error(Body body, std::initializer_list<std::string> parts) {
  try {
    body();
    ADD_FAILURE() << "expected an error containing \"" << *parts.begin() << "\"";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << "message: " << message;
  }
}

}  // namespace vitpipe::testing
