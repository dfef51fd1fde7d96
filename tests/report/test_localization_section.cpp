// The report's localization section (issue 44): per finding the boxes, the pointing game and T(IoBB) at Wang et
// al.'s thresholds 0.1 .. 0.7 with the intervals the evaluation drew, and the worst-localized images with their box;
// "not evaluated" where no boxes were scored; a file eval did not write refused in one line naming the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/png_encoder.h"
#include "explain/localize_boxes.h"
#include "report/localization_section.h"
#include "report/training_report.h"
#include "util/atomic_file.h"
#include "util/base64.h"

namespace vitpipe {
namespace {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag)
      : path_(std::filesystem::temp_directory_path() / ("vitpipe_report_" + tag + "_" + std::to_string(::getpid()))) {
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

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// What eval --boxes --save-localization writes for 5 Atelectasis boxes (3 pointing hits; IoBB 0.05 .. 0.65) and 2
// Pneumonia boxes, with intervals over boxes, and one worst image.
nlohmann::json evaluated_file() {
  BoxLocalizationResult result;
  result.method = "grad-rollout";
  result.skipped["image not in the test split"] = 2;
  std::vector<BoxScore> atelectasis = {{true, 0.5, 0.65, 0.3},
                                       {true, 0.4, 0.45, 0.2},
                                       {false, 0.1, 0.05, 0.01},
                                       {true, 0.3, 0.25, 0.1},
                                       {false, 0.2, 0.15, 0.05}};
  std::vector<BoxScore> pneumonia = {{true, 0.6, 0.35, 0.2}, {false, 0.1, 0.0, 0.0}};
  BootstrapOptions over_boxes(200, 0.95, 7);
  result.findings = {summarize_boxes("Atelectasis", atelectasis, over_boxes),
                     summarize_boxes("Pneumonia", pneumonia, over_boxes)};
  result.evaluated = 7;
  DecodedImage pixel;
  pixel.width = pixel.height = 2;
  pixel.channels = 3;
  pixel.pixels.assign(12, 200);
  result.worst.push_back({"00000072_000.png", "Pneumonia", FindingBox{}, pneumonia[1], 0.25, encode_png(pixel)});
  nlohmann::json j = localization_result_json(result);
  j["format"] = kLocalizationFormat;
  j["version"] = 1;
  j["split"] = "test";
  return j;
}

TEST(LocalizationSection, ShowsPointingAndTIoBBPerFindingWithIntervalsAndTheWorstImages) {
  ScratchDir dir("localization_section");
  const nlohmann::json j = evaluated_file();
  write_text_file_atomically(dir.path() / "localization-test.json", j.dump());
  const LocalizationFile file = read_localization_file(dir.path() / "localization-test.json");
  const std::string html = localization_section(file);
  // One row per finding: its name, its boxes, the pointing game and the 7 T(IoBB) columns, each with an interval.
  EXPECT_NE(html.find("<tr><td>Atelectasis</td><td>5</td><td>0.600 ("), std::string::npos) << html;
  EXPECT_NE(html.find("<tr><td>Pneumonia</td><td>2</td><td>0.500 ("), std::string::npos) << html;
  for (const char* t : {"0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7"})
    EXPECT_NE(html.find(std::string("<th>T(IoBB) &gt; ") + t + "</th>"), std::string::npos) << t;
  // Atelectasis IoBB 0.65, 0.45, 0.05, 0.25, 0.15: above 0.1 four of five, above 0.3 two, above 0.5 one, above 0.7
  // none.
  const auto& a = j["per_finding"]["Atelectasis"]["t_iobb"];
  EXPECT_DOUBLE_EQ(a["0.1"]["value"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(a["0.3"]["value"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(a["0.5"]["value"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(a["0.7"]["value"].get<double>(), 0.0);
  const std::string row = html.substr(html.find("<tr><td>Atelectasis"));
  const std::string atelectasis_row = row.substr(0, row.find("</tr>"));
  EXPECT_EQ(count(atelectasis_row, "<td>"), 10u) << atelectasis_row;  // name, boxes, pointing, 7 thresholds
  EXPECT_NE(atelectasis_row.find("<td>0.800 (" + std::string()), std::string::npos) << atelectasis_row;
  EXPECT_EQ(count(atelectasis_row, " ("), 8u) << "every metric with its interval: " << atelectasis_row;
  EXPECT_NE(html.find("7 boxes of the test split"), std::string::npos);
  EXPECT_NE(html.find("2 image not in the test split"), std::string::npos);
  // The worst image, embedded with its caption.
  EXPECT_EQ(count(html, "<img "), 1u);
  EXPECT_NE(html.find("src=\"data:image/png;base64," + j["worst_images"][0]["overlay_png"].get<std::string>()),
            std::string::npos);
  EXPECT_NE(html.find("00000072_000.png: Pneumonia, pointing miss"), std::string::npos);
  // The embedded numbers keep every field but the images.
  const nlohmann::json summary = localization_summary_json(file);
  EXPECT_FALSE(summary["worst_images"][0].contains("overlay_png"));
  EXPECT_EQ(summary["per_finding"], j["per_finding"]);
}

TEST(LocalizationSection, NotEvaluatedWithoutBoxesAndInTheReport) {
  const std::string none = localization_section(std::nullopt);
  EXPECT_NE(none.find("Not evaluated"), std::string::npos);
  EXPECT_NE(none.find("--save-localization"), std::string::npos);
  EXPECT_EQ(none.find("<table"), std::string::npos);

  PredictionsTable p;
  p.source = "test.csv";
  p.labels = {"Atelectasis"};
  for (int r = 0; r < 8; ++r) {
    p.images.push_back("i" + std::to_string(r) + ".png");
    p.patients.push_back("p" + std::to_string(r));
    p.targets.push_back(r % 2 ? 1.0f : 0.0f);
    p.weights.push_back(1.0f);
    p.scores.push_back(r * 0.1);
    p.probabilities.push_back(r * 0.1);
  }
  ReportInputs in;
  in.title = "t";
  in.splits["test"] = p;
  nlohmann::json summary;
  std::string html = training_report_html(in, ReportOptions{}, &summary);
  EXPECT_NE(html.find("id=\"localization-not-evaluated\""), std::string::npos);
  EXPECT_FALSE(summary.contains("localization"));

  ScratchDir dir("localization_report");
  write_text_file_atomically(dir.path() / "l.json", evaluated_file().dump());
  in.localization = read_localization_file(dir.path() / "l.json");
  html = training_report_html(in, ReportOptions{}, &summary);
  EXPECT_EQ(html.find("id=\"localization-not-evaluated\""), std::string::npos);
  EXPECT_NE(html.find("id=\"localization-table\""), std::string::npos);
  EXPECT_EQ(summary["localization"]["boxes"], 7);
  EXPECT_NE(std::find(summary["sections"].begin(), summary["sections"].end(), "localization"),
            summary["sections"].end());
}

TEST(LocalizationSection, RefusesFilesEvalDidNotWrite) {
  ScratchDir dir("localization_refused");
  const auto refused = [&](nlohmann::json j, const std::string& expected) {
    write_text_file_atomically(dir.path() / "bad.json", j.dump());
    try {
      read_localization_file(dir.path() / "bad.json");
      ADD_FAILURE() << "accepted; expected an error with " << expected;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find((dir.path() / "bad.json").string()), std::string::npos) << what;
      EXPECT_NE(what.find(expected), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  nlohmann::json j = evaluated_file();
  j.erase("format");
  refused(j, "\"format\"");
  j = evaluated_file();
  j["per_finding"]["Atelectasis"]["t_iobb"].erase("0.4");
  refused(j, "\"t_iobb\" \"0.4\"");
  j = evaluated_file();
  j["per_finding"]["Pneumonia"]["pointing_game"]["ci"] = "wide";
  refused(j, "\"pointing_game\" \"ci\"");
  j = evaluated_file();
  j["worst_images"][0]["overlay_png"] = "\" onerror=\"alert(1)";
  refused(j, "base64");
  write_text_file_atomically(dir.path() / "bad.json", "{");
  EXPECT_THROW(read_localization_file(dir.path() / "bad.json"), std::exception);
}

}  // namespace
}  // namespace vitpipe
