// What serve's page at / is built from: the page itself compiled in byte for byte (cmake/embed_file.cmake), with
// nothing to fetch from elsewhere; the card summary /v1/model carries (title, summary, facts, intended use, the
// model-index means; Markdown reduced to text); the operating points it flags at, found in the order
// served_thresholds.h gives and refused where the card says the weights are not the ones the run evaluated.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "serve/card_summary.h"
#include "serve/served_thresholds.h"
#include "serve/try_page.h"
#include "evaluation/operating_thresholds.h"
#include "util/error.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

class Scratch {
 public:
  Scratch() : path_(fs::temp_directory_path() / ("vitpipe_try_page_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string card_text(const std::string& source) {
  return "---\nlibrary_name: transformers\nmodel-index:\n- name: m\n  results:\n  - task:\n      type: "
         "image-classification\n    dataset:\n      name: NIH ChestX-ray14\n      type: chestxray14\n      split: "
         "test\n    metrics:\n    - type: roc_auc\n      value: 0.71\n      name: \"ROC-AUC A\"\n      config: A\n"
         "    - type: roc_auc\n      value: 0.6543\n      name: \"mean ROC-AUC (2 findings)\"\n      config: mean\n"
         "---\n<!-- vitpipe model card: generated from the run's files; `vitpipe card DIR` regenerates it. source: " +
         source +
         " -->\n\n# my-model\n\nA ViT image classifier fine-tuned with vitpipe from "
         "[`google/vit-base`](https://huggingface.co/google/vit-base) to flag\nfindings on chest radiographs.\n\n"
         "- Family: ViT (`vit`), 2 layers\n- Labels (2): A, B\n\nLicense: `apache-2.0`.\n\n## Intended use\n\n"
         "Research only. **This model is not a medical device.** It must not be used\nto diagnose.\n\n"
         "## Out-of-scope use\n\n- Clinical decisions.\n";
}

ThresholdSet thresholds(std::optional<int64_t> step, double youden) {
  ThresholdSet t;
  t.chosen_on = "val";
  t.step = step;
  t.labels = {"A", "B"};
  t.youden = {youden, std::nullopt};
  t.sensitivity_90 = {0.25, 0.5};
  return t;
}

TEST(TryPage, TheBinaryServesTheFileByteForByteAndItFetchesNothingElsewhere) {
  std::ifstream in(fs::path(VITPIPE_SOURCE_DIR) / "src/serve/try_page.html", std::ios::binary);
  std::stringstream file;
  file << in.rdbuf();
  ASSERT_FALSE(file.str().empty());
  EXPECT_EQ(std::string(try_page_html()), file.str());
  const std::string page(try_page_html());
  EXPECT_EQ(page.find("http://"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_FALSE(std::regex_search(page, std::regex(R"((src|href)\s*=\s*"(?!data:|#))")));
  EXPECT_NE(page.find("not a medical device"), std::string::npos);
  EXPECT_NE(page.find("sessionStorage"), std::string::npos);
  EXPECT_EQ(page.find("localStorage"), std::string::npos);
}

TEST(CardSummary, TitleSummaryFactsIntendedUseAndTheModelIndexMeans) {
  const nlohmann::json s = card_summary(card_text("{}"));
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["title"], "my-model");
  ASSERT_EQ(s["summary"].size(), 2u);
  EXPECT_EQ(
      s["summary"][0],
      "A ViT image classifier fine-tuned with vitpipe from google/vit-base to flag findings on chest radiographs.");
  EXPECT_EQ(s["summary"][1], "License: apache-2.0.");
  EXPECT_EQ(s["facts"], nlohmann::json({"Family: ViT (vit), 2 layers", "Labels (2): A, B"}));
  EXPECT_EQ(s["intended_use"], "Research only. This model is not a medical device. It must not be used to diagnose.");
  ASSERT_EQ(s["mean_roc_auc"].size(), 1u) << "the per-finding metric is not a mean";
  EXPECT_EQ(s["mean_roc_auc"][0]["split"], "test");
  EXPECT_DOUBLE_EQ(s["mean_roc_auc"][0]["value"].get<double>(), 0.6543);
}

TEST(CardSummary, NotACardIsNullAndBrokenFrontMatterLosesOnlyTheMeans) {
  EXPECT_TRUE(card_summary("Just some notes\nwithout a title\n").is_null());
  const nlohmann::json s = card_summary("---\nmodel-index: [unclosed\n---\n# t\n\nText.\n");
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["title"], "t");
  EXPECT_TRUE(s["mean_roc_auc"].empty());
  EXPECT_TRUE(s["intended_use"].is_null());
  EXPECT_EQ(markdown_plain_text("a [b](c) [d] `e` **f** __g__"), "a b [d] e f g");
}

TEST(ServedThresholds, FoundInOrderAndOnlyForTheWeightsTheRunEvaluated) {
  Scratch scratch;
  const fs::path model = scratch.path() / "model", run = scratch.path() / "run";
  fs::create_directories(model);
  fs::create_directories(run);
  EXPECT_FALSE(find_served_thresholds(model, "")) << "no card, no file: no operating point";

  write_thresholds_file(run / "thresholds.json", thresholds(7, 0.3));
  write(model / "README.md", card_text("{\"run\": \"" + run.string() + "\"}"));
  auto found = find_served_thresholds(model, "");
  ASSERT_TRUE(found) << "the run the card names (its own model: no step)";
  EXPECT_DOUBLE_EQ(*found->thresholds.youden[0], 0.3);
  EXPECT_EQ(found->source.find(run.string()), std::string::npos) << "no path in what /v1/model discloses";

  write(model / "README.md", card_text("{\"run\": \"" + run.string() + "\", \"step\": 5}"));
  EXPECT_FALSE(find_served_thresholds(model, "")) << "an export of step 5; the run evaluated step 7";
  write(model / "README.md", card_text("{\"run\": \"" + run.string() + "\", \"step\": 7}"));
  EXPECT_TRUE(find_served_thresholds(model, "")) << "an export of the evaluated step";

  write_thresholds_file(model / "thresholds.json", thresholds(std::nullopt, 0.4));
  found = find_served_thresholds(model, "");
  ASSERT_TRUE(found);
  EXPECT_DOUBLE_EQ(*found->thresholds.youden[0], 0.4) << "the model directory's own before the run's";
  write_thresholds_file(scratch.path() / "given.json", thresholds(std::nullopt, 0.5));
  found = find_served_thresholds(model, (scratch.path() / "given.json").string());
  ASSERT_TRUE(found);
  EXPECT_DOUBLE_EQ(*found->thresholds.youden[0], 0.5) << "--thresholds before all";
  EXPECT_EQ(found->source, "--thresholds");

  const nlohmann::json j = served_thresholds_json(found, {"B", "C"});
  EXPECT_EQ(j["chosen_on"], "val");
  EXPECT_TRUE(j["findings"]["B"]["youden"].is_null()) << "undefined on val";
  EXPECT_DOUBLE_EQ(j["findings"]["B"]["sensitivity_90"].get<double>(), 0.5);
  EXPECT_TRUE(j["findings"]["C"]["youden"].is_null() && j["findings"]["C"]["sensitivity_90"].is_null())
      << "a label the file lacks has no operating point";
  EXPECT_TRUE(served_thresholds_json(std::nullopt, {"A"}).is_null());

  write(scratch.path() / "broken.json", "{\"format\": \"other\"}");
  EXPECT_THROW(find_served_thresholds(model, (scratch.path() / "broken.json").string()), Error);
}

}  // namespace
}  // namespace vitpipe
