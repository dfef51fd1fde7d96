// The report's operating points: every split is scored at the thresholds chosen on the val split (a threshold tuned
// on the split it scores is labelled optimistic), checked against a brute-force Youden / 90%-sensitivity search
// written here; its intervals resample patients where the predictions name them.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "report/training_report.h"
#include "util/random.h"

namespace vitpipe {
namespace {

const std::vector<std::string> kLabels = {"Atelectasis", "Effusion"};

PredictionsTable make_split(const std::string& name, int64_t rows, uint64_t seed) {
  PredictionsTable p;
  p.source = name + ".csv";
  p.labels = kLabels;
  Rng rng(seed);
  for (int64_t r = 0; r < rows; ++r) {
    p.images.push_back(name + std::to_string(r) + ".png");
    p.patients.push_back("patient" + std::to_string(r / 4));  // four images per patient
    for (size_t l = 0; l < kLabels.size(); ++l) {
      const bool positive = rng.uniform() < 0.35;
      const double z = rng.normal() + (positive ? 1.2 : 0.0);
      p.targets.push_back(positive ? 1.0f : 0.0f);
      p.weights.push_back(1.0f);
      p.scores.push_back(z);
      p.probabilities.push_back(1.0 / (1.0 + std::exp(-z)));
    }
  }
  return p;
}

struct Rates {
  double sensitivity, specificity;
  double youden;  // tp/P - fp/N, the form scikit-learn's roc_curve gives (tpr - fpr)
};

Rates rates_at(const PredictionsTable& p, size_t l, double t) {
  double tp = 0, fn = 0, tn = 0, fp = 0;
  for (size_t r = 0; r < p.rows(); ++r) {
    const bool positive = p.targets[r * kLabels.size() + l] == 1.0f;
    const bool predicted = p.probabilities[r * kLabels.size() + l] >= t;
    (positive ? (predicted ? tp : fn) : (predicted ? fp : tn)) += 1;
  }
  return {tp / (tp + fn), tn / (tn + fp), tp / (tp + fn) - fp / (tn + fp)};
}

// Brute force over every distinct probability: the highest threshold maximising sensitivity + specificity - 1,
// and the highest threshold reaching 90% sensitivity.
std::pair<double, double> own_thresholds(const PredictionsTable& p, size_t l) {
  std::set<double> candidates;
  for (size_t r = 0; r < p.rows(); ++r) candidates.insert(p.probabilities[r * kLabels.size() + l]);
  double youden = 0, best = -2, sensitive = 0;
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    const Rates x = rates_at(p, l, *it);
    if (x.youden > best) best = x.youden, youden = *it;
  }
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    if (rates_at(p, l, *it).sensitivity >= 0.9) {
      sensitive = *it;
      break;
    }
  }
  return {youden, sensitive};
}

TEST(ReportThresholds, TestIsScoredAtTheValidationThresholds) {
  ReportInputs in;
  in.title = "synthetic";
  in.splits["val"] = make_split("val", 120, 1);
  in.splits["test"] = make_split("test", 160, 2);
  ReportOptions options;
  options.bootstrap = 50;
  nlohmann::json summary;
  const std::string html = training_report_html(in, options, &summary);
  const PredictionsTable& val = in.splits["val"];
  const PredictionsTable& test = in.splits["test"];
  for (size_t l = 0; l < kLabels.size(); ++l) {
    const auto [youden, sensitive] = own_thresholds(val, l);
    ASSERT_NE(youden, own_thresholds(test, l).first) << "the data must make val's and test's choices differ";
    for (const char* split : {"val", "test"}) {
      const nlohmann::json& label = summary["splits"][split]["per_label"][kLabels[l]];
      const PredictionsTable& p = in.splits[split];
      EXPECT_EQ(label["youden"]["threshold"].get<double>(), youden) << split << " " << kLabels[l];
      EXPECT_EQ(label["sensitivity_90"]["threshold"].get<double>(), sensitive) << split << " " << kLabels[l];
      const Rates y = rates_at(p, l, youden), s = rates_at(p, l, sensitive);
      EXPECT_DOUBLE_EQ(label["youden"]["sensitivity"].get<double>(), y.sensitivity) << split;
      EXPECT_DOUBLE_EQ(label["youden"]["specificity"].get<double>(), y.specificity) << split;
      EXPECT_DOUBLE_EQ(label["sensitivity_90"]["sensitivity"].get<double>(), s.sensitivity) << split;
      EXPECT_DOUBLE_EQ(label["sensitivity_90"]["specificity"].get<double>(), s.specificity) << split;
    }
    (void)test;
  }
  EXPECT_EQ(summary["splits"]["test"]["operating_points"]["chosen_on"], "val");
  EXPECT_EQ(summary["splits"]["test"]["operating_points"]["optimistic"], false);
  EXPECT_EQ(summary["splits"]["val"]["operating_points"]["optimistic"], true);
  EXPECT_EQ(summary["splits"]["test"]["ci_unit"], "patient");
  EXPECT_NE(html.find("applied unchanged to the test predictions"), std::string::npos);
  EXPECT_NE(html.find("Youden thr. (optimistic)"), std::string::npos);  // val's own table
  EXPECT_NE(html.find("Youden thr. (val)"), std::string::npos);         // test's table
}

TEST(ReportThresholds, ASplitAloneIsScoredAtItsOwnThresholdsLabelledOptimistic) {
  ReportInputs in;
  in.title = "synthetic";
  in.splits["test"] = make_split("test", 160, 2);
  ReportOptions options;
  options.bootstrap = 0;
  nlohmann::json summary;
  const std::string html = training_report_html(in, options, &summary);
  for (size_t l = 0; l < kLabels.size(); ++l) {
    EXPECT_EQ(summary["splits"]["test"]["per_label"][kLabels[l]]["youden"]["threshold"].get<double>(),
              own_thresholds(in.splits["test"], l).first);
  }
  EXPECT_EQ(summary["splits"]["test"]["operating_points"]["optimistic"], true);
  EXPECT_NE(html.find("<strong>optimistic</strong>"), std::string::npos);
  // Thresholds from a file (a run's thresholds.json) are applied instead, and named.
  ThresholdSet chosen;
  chosen.chosen_on = "val";
  chosen.step = 12;
  chosen.file = "run/thresholds.json";
  chosen.labels = kLabels;
  chosen.youden = {0.5, std::nullopt};
  chosen.sensitivity_90 = {0.25, 0.3};
  in.thresholds = chosen;
  training_report_html(in, options, &summary);
  const nlohmann::json& test = summary["splits"]["test"];
  EXPECT_EQ(test["operating_points"]["optimistic"], false);
  EXPECT_EQ(test["operating_points"]["step"], 12);
  EXPECT_EQ(test["per_label"]["Atelectasis"]["youden"]["threshold"].get<double>(), 0.5);
  EXPECT_TRUE(test["per_label"]["Effusion"]["youden"].is_null());
  EXPECT_EQ(test["per_label"]["Effusion"]["sensitivity_90"]["threshold"].get<double>(), 0.3);
}

}  // namespace
}  // namespace vitpipe
