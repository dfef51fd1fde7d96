// Inputs the fuzz harnesses (tools/fuzz) found that escaped as something other than a vitpipe::Error naming the
// file: each is now refused like any other bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "train/train_options.h"
#include "train/training_checkpoint.h"
#include "util/error.h"

namespace vitpipe {
namespace {

// fuzz_train_options: a number beyond a double in a JSON config threw nlohmann's out_of_range (406), which the
// reader did not catch (it caught parse errors only).
TEST(FuzzRegressions, TrainOptionsJsonNumberBeyondADoubleIsInvalidJson) {
  const auto path = std::filesystem::temp_directory_path() / "vitpipe-fuzz-regression-options.json";
  std::ofstream(path) << R"({"lr": 555555555555555555555E5555555555555555555555})";
  TrainOptions options;
  try {
    apply_config_file(options, path);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path.string() + ": invalid JSON"), std::string::npos) << message;
    EXPECT_NE(message.find("number overflow"), std::string::npos) << message;
  }
  std::filesystem::remove(path);
}

// fuzz_training_checkpoint: a checkpoints/latest naming something too long for the file system threw
// std::filesystem_error; one naming another directory ("../x") was followed. Only step-N beside it is accepted.
TEST(FuzzRegressions, CheckpointPointerNamingAnythingButAStepDirectoryIsRefused) {
  const auto output = std::filesystem::temp_directory_path() / "vitpipe-fuzz-regression-output";
  std::filesystem::create_directories(output / "checkpoints");
  for (const std::string& name : {std::string(5000, '['), std::string("../../etc"), std::string("step-1/../..")}) {
    std::ofstream(output / "checkpoints" / "latest") << name << "\n";
    try {
      latest_checkpoint(output);
      ADD_FAILURE() << "accepted " << name.substr(0, 20);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("which is not a checkpoint directory (step-NNNNNNNN)"), std::string::npos)
          << e.what();
    }
  }
  std::ofstream(output / "checkpoints" / "latest") << "step-00000007\n";
  try {
    latest_checkpoint(output);
    ADD_FAILURE() << "accepted a missing checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("which is not a complete checkpoint"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(output);
}

}  // namespace
}  // namespace vitpipe
