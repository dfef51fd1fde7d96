// thresholds.json: written and read back to the bit, applied by finding name, and a malformed file refused in one
// message naming the file and the field.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "evaluation/operating_thresholds.h"
#include "reference.h"
#include "util/error.h"

namespace vitpipe {
namespace {

using testing::ScratchDir;

std::string refusal(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
  try {
    read_thresholds_file(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(OperatingThresholds, RoundTripAndApplyByName) {
  // Two labels, four rows: probabilities and targets row-major.
  const std::vector<double> p = {0.9, 0.2, 0.7, 0.6, 0.4, 0.1, 0.1, 0.8};
  const std::vector<float> y = {1, 0, 1, 1, 0, 0, 0, 1};
  ThresholdSet chosen = choose_thresholds({"A", "B"}, p, y, {}, "val");
  ASSERT_TRUE(chosen.youden[0].has_value());
  EXPECT_EQ(*chosen.youden[0], 0.7);  // A: 0.9, 0.7 positive; 0.4, 0.1 negative
  chosen.step = 40;
  chosen.data = "csv:/d.csv";
  ScratchDir dir("thresholds");
  write_thresholds_file(dir.path() / "t.json", chosen);
  const ThresholdSet read = read_thresholds_file(dir.path() / "t.json");
  EXPECT_EQ(read.labels, chosen.labels);
  EXPECT_EQ(read.youden, chosen.youden);
  EXPECT_EQ(read.sensitivity_90, chosen.sensitivity_90);
  EXPECT_EQ(read.step, 40);
  EXPECT_EQ(read.chosen_on, "val");
  EXPECT_TRUE(tuned_on(read, "val", "csv:/d.csv"));
  EXPECT_FALSE(tuned_on(read, "test", "csv:/d.csv"));
  EXPECT_FALSE(tuned_on(read, "val", "csv:/other.csv"));
  // Applied to a split whose labels come in another order, one of them unknown to the file.
  const std::vector<double> q = {0.1, 0.75, 0.5, 0.3};
  const std::vector<float> t = {1, 1, 0, 0};
  const auto points = apply_thresholds(read, {"C", "A"}, q, t, {});
  EXPECT_FALSE(points[0].youden.has_value());
  ASSERT_TRUE(points[1].youden.has_value());
  EXPECT_EQ(points[1].youden->tp, 1);  // 0.75 >= 0.7
  EXPECT_EQ(points[1].youden->fn, 0);
  EXPECT_EQ(points[1].youden->tn, 1);  // 0.3 < 0.7
}

TEST(OperatingThresholds, RefusesMalformedFiles) {
  ScratchDir dir("thresholds_bad");
  const auto f = dir.path() / "bad.json";
  EXPECT_NE(refusal(f, "{").find("bad.json: not JSON"), std::string::npos);
  EXPECT_NE(refusal(f, R"({"format": "other"})").find("\"format\""), std::string::npos);
  const std::string head =
      R"({"format": "vitpipe-thresholds", "version": 1, "chosen_on": "val", "score": "probability", )";
  EXPECT_NE(refusal(f, head + R"("findings": {}})").find("\"findings\""), std::string::npos);
  EXPECT_NE(refusal(f, head + R"("findings": {"A": {"youden": 1.5}}})").find("findings.A.youden"), std::string::npos);
  EXPECT_NE(refusal(f, head + R"("findings": {"A": {"youden": "high"}}})").find("findings.A.youden"),
            std::string::npos);
  EXPECT_NE(refusal(f, head + R"("step": -1, "findings": {"A": {}}})").find("\"step\""), std::string::npos);
  EXPECT_NE(refusal(dir.path() / "none.json", "").find("none.json"), std::string::npos);
  std::filesystem::remove(dir.path() / "none.json");
  try {
    read_thresholds_file(dir.path() / "none.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no such file"), std::string::npos);
  }
}

}  // namespace
}  // namespace vitpipe
