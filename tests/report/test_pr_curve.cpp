// The report's precision-recall curves are scikit-learn's precision_recall_curve, reversed (highest threshold
// first), and nothing else: the path starts at (recall 0, precision 1) and ends at the lowest threshold's point
// (recall 1), with no line drawn back to (0, 1) (issue 45, defect 3).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "evaluation/calibration.h"
#include "evaluation/curves.h"
#include "evaluation/operating_point.h"
#include "report/training_report.h"

namespace vitpipe {
namespace {

// sklearn.metrics.precision_recall_curve([1, 0, 1, 0], [0.9, 0.8, 0.7, 0.6]) gives precision [0.5, 2/3, 0.5, 1, 1],
// recall [1, 1, 0.5, 0.5, 0], thresholds [0.6, 0.7, 0.8, 0.9] (the last point has none).
const std::vector<double> kScores = {0.9, 0.8, 0.7, 0.6};
const std::vector<float> kTargets = {1, 0, 1, 0};

TEST(PrCurve, IsScikitLearnsReversed) {
  const std::vector<CurvePoint> points = pr_curve(rank_label(kScores, kTargets, {}));
  const std::vector<double> recall = {0, 0.5, 0.5, 1, 1}, precision = {1, 1, 0.5, 2.0 / 3.0, 0.5};
  const std::vector<double> threshold = {INFINITY, 0.9, 0.8, 0.7, 0.6};
  ASSERT_EQ(points.size(), recall.size());
  for (size_t i = 0; i < points.size(); ++i) {
    EXPECT_DOUBLE_EQ(points[i].x, recall[i]) << "point " << i;
    EXPECT_DOUBLE_EQ(points[i].y, precision[i]) << "point " << i;
    EXPECT_EQ(points[i].threshold, threshold[i]) << "point " << i;
  }
}

// The d attribute of the first series path of the chart `id`.
std::string series_path(const std::string& html, const std::string& id) {
  const size_t chart = html.find("id=\"" + id + "\"");
  if (chart == std::string::npos) return "no chart " + id;
  const size_t path = html.find("<path class=\"series\"", chart);
  const size_t d = html.find(" d=\"", path);
  if (path == std::string::npos || d == std::string::npos) return "no series path in " + id;
  return html.substr(d + 4, html.find('"', d + 4) - d - 4);
}

TEST(PrCurve, ReportPathIsTheCurveOnly) {
  ReportInputs inputs;
  inputs.title = "pr";
  PredictionsTable table;
  table.source = "predictions-test.csv";
  table.labels = {"finding"};
  table.images = {"a.png", "b.png", "c.png", "d.png"};
  table.patients = {"1", "2", "3", "4"};
  table.targets = kTargets;
  table.weights = {1, 1, 1, 1};
  table.scores = kScores;
  table.probabilities = kScores;
  inputs.splits["test"] = table;
  ReportOptions options;
  options.bootstrap = 0;
  const std::string html = training_report_html(inputs, options);
  // A 272 x 236 chart: the plot spans x 48..260 (recall 0..1) and y 198..26 (precision 0..1).
  EXPECT_EQ(series_path(html, "pr-0"), "M48.00,26.00L154.00,26.00L154.00,112.00L260.00,83.33L260.00,112.00");
}

}  // namespace
}  // namespace vitpipe
