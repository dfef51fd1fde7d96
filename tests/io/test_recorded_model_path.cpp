// Run files name a local model by its absolute path and a Hub repo id as given; a recorded base that moved is
// refused with one line naming it (io/recorded_model_path.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "io/recorded_model_path.h"
#include "util/error.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

// Runs with the working directory at a fresh temporary directory holding "mini/".
class RecordedModelPath : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = fs::current_path();
    root_ = fs::temp_directory_path() / concat("vitpipe_recorded_", ::getpid());
    fs::remove_all(root_);
    fs::create_directories(root_ / "mini");
    fs::current_path(root_);
  }
  void TearDown() override {
    fs::current_path(previous_);
    fs::remove_all(root_);
  }
  fs::path previous_, root_;
};

TEST_F(RecordedModelPath, LocalDirectoriesBecomeAbsolute) {
  const std::string expected = (root_ / "mini").string();
  EXPECT_EQ(recorded_model_reference("mini"), expected);
  EXPECT_EQ(recorded_model_reference("mini/"), expected);
  EXPECT_EQ(recorded_model_reference("./mini/../mini"), expected);
  EXPECT_EQ(recorded_model_reference(expected), expected);
}

TEST_F(RecordedModelPath, HubIdsStayIds) {
  EXPECT_EQ(recorded_model_reference("google/vit-base-patch16-224-in21k"), "google/vit-base-patch16-224-in21k");
  EXPECT_EQ(recorded_model_reference("gpt2"), "gpt2");  // no such directory here: an id
}

TEST_F(RecordedModelPath, AMovedBaseIsRefusedNamingIt) {
  const std::string base = (root_ / "mini").string();
  EXPECT_NO_THROW(require_recorded_base(base, "RUN/adapter/adapter_config.json", "put it back"));
  EXPECT_NO_THROW(require_recorded_base("google/vit-base-patch16-224-in21k", "x", "y"));
  EXPECT_NO_THROW(require_recorded_base("mini-elsewhere", "x", "y"));  // relative: resolved (or refused) as usual
  fs::rename(root_ / "mini", root_ / "moved");
  try {
    require_recorded_base(base, "RUN/adapter/adapter_config.json", "put it back");
    FAIL() << "a moved base passed";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("RUN/adapter/adapter_config.json"), std::string::npos) << message;
    EXPECT_NE(message.find(base + " is no longer there"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace vitpipe
