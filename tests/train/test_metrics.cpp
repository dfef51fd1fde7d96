#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "evaluation/ranking_metrics.h"
#include "reference.h"
#include "train/metrics_accumulator.h"
#include "util/error.h"
#include "util/random.h"

namespace vitpipe {
namespace {

using testing::read_json_file;
using testing::run_reference_script;
using testing::ScratchDir;

std::vector<float> floats(const nlohmann::json& values) { return values.get<std::vector<float>>(); }

void expect_optional_near(const std::optional<double>& got, const nlohmann::json& expected, const std::string& what) {
  if (expected.is_null()) {
    EXPECT_FALSE(got.has_value()) << what << ": expected undefined, got " << got.value_or(-1);
  } else {
    ASSERT_TRUE(got.has_value()) << what << ": expected " << expected.get<double>() << ", got undefined";
    EXPECT_NEAR(*got, expected.get<double>(), 1e-12) << what;
  }
}

TEST(Metrics, MatchScikitLearn) {
  ScratchDir dir("metrics");
  ASSERT_TRUE(run_reference_script("reference_metrics.py", dir.path()));
  const nlohmann::json ref = read_json_file(dir.path() / "metrics_cases.json");
  ASSERT_GE(ref["cases"].size(), 10u);
  for (const auto& c : ref["cases"]) {
    const std::string name = c["name"];
    const int64_t rows = c["rows"], labels = c["labels"];
    const std::vector<float> scores = floats(c["scores"]), targets = floats(c["targets"]);
    EvaluationMetrics m = evaluate_multilabel(scores, targets, labels);
    ASSERT_EQ(m.rows, rows);
    ASSERT_EQ(m.num_labels, labels);
    double auc_sum = 0.0, ap_sum = 0.0;
    int auc_count = 0, ap_count = 0;
    for (int64_t l = 0; l < labels; ++l) {
      const std::string what = name + " label " + std::to_string(l);
      expect_optional_near(m.roc_auc.per_label[l], c["roc_auc"][l], what + " roc_auc");
      expect_optional_near(m.average_precision.per_label[l], c["average_precision"][l], what + " average_precision");
      if (!c["roc_auc"][l].is_null()) {
        auc_sum += c["roc_auc"][l].get<double>();
        ++auc_count;
      }
      if (!c["average_precision"][l].is_null()) {
        ap_sum += c["average_precision"][l].get<double>();
        ++ap_count;
      }
      if (labels == 1) {  // the single-label entry points agree with the multi-label one
        expect_optional_near(roc_auc(scores, targets), c["roc_auc"][l], what + " roc_auc()");
        expect_optional_near(average_precision(scores, targets), c["average_precision"][l],
                             what + " average_precision()");
      }
    }
    EXPECT_EQ(m.roc_auc.defined_labels, auc_count) << name;
    EXPECT_EQ(m.average_precision.defined_labels, ap_count) << name;
    expect_optional_near(m.roc_auc.mean, auc_count ? nlohmann::json(auc_sum / auc_count) : nlohmann::json(nullptr),
                         name + " mean roc_auc");
    expect_optional_near(m.average_precision.mean,
                         ap_count ? nlohmann::json(ap_sum / ap_count) : nlohmann::json(nullptr),
                         name + " mean average_precision");
  }
  for (const auto& p : ref["percentiles"]) {
    const std::vector<double> values = p["values"];
    for (size_t i = 0; i < p["q"].size(); ++i) {
      // numpy's linear interpolation, bit for bit.
      EXPECT_EQ(percentile(values, p["q"][i].get<double>()), p["expected"][i].get<double>())
          << "n=" << values.size() << " q=" << p["q"][i];
    }
  }
}

TEST(Metrics, ExactSmallCases) {
  // scikit-learn's documented examples: roc_auc 0.75, average precision 0.8333...
  const std::vector<float> scores = {0.1f, 0.4f, 0.35f, 0.8f}, targets = {0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(*roc_auc(scores, targets), 0.75);
  EXPECT_DOUBLE_EQ(*average_precision(scores, targets), 5.0 / 6.0);
  // A tie between a positive and a negative counts one half.
  EXPECT_DOUBLE_EQ(*roc_auc(std::vector<float>{0.5f, 0.5f}, std::vector<float>{1, 0}), 0.5);
  EXPECT_DOUBLE_EQ(*average_precision(std::vector<float>{0.5f, 0.5f}, std::vector<float>{1, 0}), 0.5);
  EXPECT_FALSE(roc_auc(std::vector<float>{0.1f, 0.2f}, std::vector<float>{1, 1}).has_value());
  EXPECT_DOUBLE_EQ(*average_precision(std::vector<float>{0.1f, 0.2f}, std::vector<float>{1, 1}), 1.0);
  EXPECT_FALSE(average_precision(std::vector<float>{0.1f, 0.2f}, std::vector<float>{0, 0}).has_value());
  EXPECT_FALSE(roc_auc(std::vector<float>{}, std::vector<float>{}).has_value());
}

TEST(Metrics, RefusesBadInput) {
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(message([&] {
              roc_auc(std::vector<float>{0.1f, nan}, std::vector<float>{0, 1});
            }).find("NaN"),
            std::string::npos);
  EXPECT_NE(message([&] {
              roc_auc(std::vector<float>{0.1f, 0.2f}, std::vector<float>{0, 0.5f});
            }).find("expected 0 or 1"),
            std::string::npos);
  EXPECT_NE(message([&] {
              roc_auc(std::vector<float>{0.1f}, std::vector<float>{0, 1});
            }).find("targets"),
            std::string::npos);
  EXPECT_NE(message([&] { evaluate_multilabel(std::vector<float>(5), std::vector<float>(5), 2); }).find("rows of 2"),
            std::string::npos);
  EXPECT_NE(message([&] {
              evaluate_multilabel(std::vector<float>{0, 1}, std::vector<float>{0, 1}, 1, BootstrapOptions{0, 0.95, 1});
            }).find("resamples"),
            std::string::npos);
  EXPECT_NE(message([&] {
              evaluate_multilabel(std::vector<float>{0, 1}, std::vector<float>{0, 1}, 1, BootstrapOptions{10, 1.0, 1});
            }).find("confidence"),
            std::string::npos);
  ScoreAccumulator acc(3);
  EXPECT_NE(message([&] { acc.add(std::vector<float>(4), std::vector<float>(4)); }).find("rows of 3"),
            std::string::npos);
  EXPECT_NE(message([&] {
              acc.add(Tensor::zeros({2, 4}), Tensor::zeros({2, 4}));
            }).find("expected [rows, 3]"),
            std::string::npos);
  EXPECT_EQ(acc.rows(), 0);
}

// Random multi-label data: a weak signal, rare labels, ties.
void make_data(int64_t rows, int64_t labels, uint64_t seed, std::vector<float>& scores, std::vector<float>& targets) {
  Rng rng(seed);
  scores.resize(static_cast<size_t>(rows * labels));
  targets.resize(scores.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t l = 0; l < labels; ++l) {
      const size_t i = static_cast<size_t>(r * labels + l);
      const double prevalence = 0.01 + 0.03 * static_cast<double>(l);
      targets[i] = rng.uniform() < prevalence ? 1.0f : 0.0f;
      float s = static_cast<float>(rng.normal() + 0.8 * targets[i]);
      if (l % 3 == 0) s = std::round(s * 4.0f) / 4.0f;  // ties
      scores[i] = s;
    }
  }
}

TEST(Metrics, BootstrapResampleEqualsMaterialisedResample) {
  std::vector<float> scores, targets;
  const int64_t rows = 300, labels = 4;
  make_data(rows, labels, 7, scores, targets);
  BootstrapOptions options{20, 0.9, 123};
  BootstrapDistribution dist = bootstrap_distribution(scores, targets, labels, options);
  ASSERT_EQ(dist.roc_auc.size(), 20u);
  for (int64_t b = 0; b < options.resamples; ++b) {
    std::vector<uint32_t> counts = bootstrap_counts(rows, options.seed, b);
    int64_t total = 0;
    for (uint32_t c : counts) total += c;
    ASSERT_EQ(total, rows);
    for (int64_t l = 0; l < labels; ++l) {
      std::vector<float> s, t;
      for (int64_t r = 0; r < rows; ++r) {
        for (uint32_t k = 0; k < counts[r]; ++k) {
          s.push_back(scores[r * labels + l]);
          t.push_back(targets[r * labels + l]);
        }
      }
      const auto auc = roc_auc(s, t), ap = average_precision(s, t);
      ASSERT_EQ(auc.has_value(), dist.roc_auc[b][l].has_value());
      ASSERT_EQ(ap.has_value(), dist.average_precision[b][l].has_value());
      if (auc) {
        EXPECT_NEAR(*auc, *dist.roc_auc[b][l], 1e-12);
      }
      if (ap) {
        EXPECT_NEAR(*ap, *dist.average_precision[b][l], 1e-12);
      }
    }
  }
}

TEST(Metrics, BootstrapIntervalsSkipOneClassResamples) {
  // Label 1 has a single positive among 40 rows: many resamples miss it and must be skipped and counted.
  std::vector<float> scores, targets;
  const int64_t rows = 40, labels = 2;
  make_data(rows, labels, 3, scores, targets);
  for (int64_t r = 0; r < rows; ++r) targets[r * labels + 1] = r == 5 ? 1.0f : 0.0f;
  for (int64_t r = 0; r < rows; ++r) targets[r * labels + 0] = r % 2 ? 1.0f : 0.0f;
  BootstrapOptions options{200, 0.95, 9};
  EvaluationMetrics m = evaluate_multilabel(scores, targets, labels, options);
  BootstrapDistribution dist = bootstrap_distribution(scores, targets, labels, options);
  for (int64_t l = 0; l < labels; ++l) {
    std::vector<double> defined;
    for (const auto& resample : dist.roc_auc) {
      if (resample[l]) defined.push_back(*resample[l]);
    }
    ASSERT_TRUE(m.roc_auc.per_label_ci[l].has_value());
    EXPECT_EQ(m.roc_auc.per_label_ci[l]->resamples, static_cast<int64_t>(defined.size()));
    EXPECT_EQ(m.roc_auc.per_label_ci[l]->low, percentile(defined, 2.5));
    EXPECT_EQ(m.roc_auc.per_label_ci[l]->high, percentile(defined, 97.5));
    EXPECT_LE(m.roc_auc.per_label_ci[l]->low, m.roc_auc.per_label_ci[l]->high);
  }
  // P(positive row drawn) = 1 - (39/40)^40 ~ 0.64: clearly fewer than all, clearly more than none.
  EXPECT_LT(m.roc_auc.per_label_ci[1]->resamples, 170);
  EXPECT_GT(m.roc_auc.per_label_ci[1]->resamples, 90);
  EXPECT_EQ(m.roc_auc.per_label_ci[0]->resamples, 200);
  // The mean's interval uses only resamples where both labels are defined.
  ASSERT_TRUE(m.roc_auc.mean_ci.has_value());
  EXPECT_EQ(m.roc_auc.mean_ci->resamples, m.roc_auc.per_label_ci[1]->resamples);
  // Same seed, same answer; another seed, another answer.
  EvaluationMetrics again = evaluate_multilabel(scores, targets, labels, options);
  EXPECT_EQ(again.roc_auc.per_label_ci[0]->low, m.roc_auc.per_label_ci[0]->low);
  options.seed = 10;
  EvaluationMetrics other = evaluate_multilabel(scores, targets, labels, options);
  EXPECT_NE(other.roc_auc.per_label_ci[0]->low, m.roc_auc.per_label_ci[0]->low);
}

TEST(Metrics, AccumulatorEqualsOneShotAndExposesRawArrays) {
  std::vector<float> scores, targets;
  const int64_t rows = 97, labels = 3;
  make_data(rows, labels, 11, scores, targets);
  ScoreAccumulator acc(labels);
  for (int64_t r = 0; r < rows; r += 10) {
    const int64_t n = std::min<int64_t>(10, rows - r);
    Tensor s = Tensor::empty({n, labels}), t = Tensor::empty({n, labels});
    std::copy_n(scores.begin() + r * labels, n * labels, s.f32());
    std::copy_n(targets.begin() + r * labels, n * labels, t.f32());
    acc.add(s, t);
  }
  EXPECT_EQ(acc.rows(), rows);
  EXPECT_EQ(acc.scores(), scores);
  EXPECT_EQ(acc.targets(), targets);
  EvaluationMetrics a = acc.evaluate(), b = evaluate_multilabel(scores, targets, labels);
  for (int64_t l = 0; l < labels; ++l) {
    EXPECT_EQ(a.roc_auc.per_label[l], b.roc_auc.per_label[l]);
    EXPECT_EQ(a.average_precision.per_label[l], b.average_precision.per_label[l]);
  }
  // Gathering: another process's raw arrays appended give the metrics of the union.
  ScoreAccumulator gathered(labels);
  gathered.add(std::span<const float>(acc.scores()).subspan(0, 30 * labels),
               std::span<const float>(acc.targets()).subspan(0, 30 * labels));
  gathered.add(std::span<const float>(acc.scores()).subspan(30 * labels),
               std::span<const float>(acc.targets()).subspan(30 * labels));
  EXPECT_EQ(gathered.evaluate().roc_auc.mean, a.roc_auc.mean);
  acc.clear();
  EXPECT_EQ(acc.rows(), 0);
}

TEST(Metrics, JsonReport) {
  const std::vector<float> scores = {0.1f, 0.9f, 0.4f, 0.2f, 0.35f, 0.3f, 0.8f, 0.7f};
  const std::vector<float> targets = {0, 0, 0, 0, 1, 0, 1, 0};
  EvaluationMetrics m = evaluate_multilabel(scores, targets, 2, BootstrapOptions{50, 0.95, 1});
  nlohmann::json j = metrics_to_json(m, {"Atelectasis", "Hernia"});
  EXPECT_EQ(j["rows"], 4);
  EXPECT_EQ(j["roc_auc"]["per_label"]["Atelectasis"]["positives"], 2);
  EXPECT_DOUBLE_EQ(j["roc_auc"]["per_label"]["Atelectasis"]["value"].get<double>(), 0.75);
  EXPECT_TRUE(j["roc_auc"]["per_label"]["Hernia"]["value"].is_null());
  EXPECT_TRUE(j["roc_auc"]["per_label"]["Hernia"]["ci"].is_null());
  EXPECT_EQ(j["roc_auc"]["defined_labels"], 1);
  EXPECT_DOUBLE_EQ(j["roc_auc"]["mean"].get<double>(), 0.75);
  EXPECT_TRUE(j["roc_auc"]["mean_ci"].contains("low"));
  EXPECT_THROW(metrics_to_json(m, {"only one"}), Error);
}

// The size of ChestX-ray14's test list: 25,596 x 14 with 1000 resamples must take seconds, not minutes.
TEST(Metrics, BootstrapIsFastAtTestListSize) {
  std::vector<float> scores, targets;
  const int64_t rows = 25596, labels = 14;
  make_data(rows, labels, 5, scores, targets);
  const auto start = std::chrono::steady_clock::now();
  EvaluationMetrics m = evaluate_multilabel(scores, targets, labels, BootstrapOptions{1000, 0.95, 0});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("25596 x 14, 1000 resamples: %.2f s\n", seconds);
  EXPECT_LT(seconds, 30.0);  // generous: the machine is shared; a few seconds expected
  ASSERT_TRUE(m.roc_auc.mean_ci.has_value());
  EXPECT_EQ(m.roc_auc.mean_ci->resamples, 1000);
  EXPECT_LT(m.roc_auc.mean_ci->low, *m.roc_auc.mean);
  EXPECT_GT(m.roc_auc.mean_ci->high, *m.roc_auc.mean);
}

}  // namespace
}  // namespace vitpipe
