// The patient-level (cluster) bootstrap: every resample's ROC-AUC and average precision, the percentile intervals
// and the count of skipped one-class resamples equal a float64 NumPy + scikit-learn recomputation from the same
// drawn patients (tests/train/reference_cluster_bootstrap.py); every row its own patient gives the image-level
// intervals unchanged; patient ids are required when patients are asked for.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "evaluation/bootstrap_unit.h"
#include "evaluation/ranking_metrics.h"
#include "reference.h"
#include "util/error.h"
#include "util/random.h"

namespace vitpipe {
namespace {

using testing::read_json_file;
using testing::run_reference_script;
using testing::ScratchDir;
using testing::write_json_file;

// Patients with 1..24 images each, listed interleaved (not grouped). Findings are mostly the patient's (an image
// keeps its patient's finding 9 times in 10) and scores carry a per-patient offset, so images of one patient are
// alike; the rare label is positive in two patients only, so some resamples lack its positives.
struct ClusteredData {
  int64_t rows = 0, labels = 3;
  std::vector<float> scores, targets;
  std::vector<std::string> patients;
};

ClusteredData make_clustered(uint64_t seed) {
  ClusteredData d;
  Rng rng(seed);
  const int patients = 18;
  std::vector<std::string> pool;
  std::vector<std::vector<double>> offset(patients);
  std::vector<std::vector<bool>> finding(patients);
  for (int p = 0; p < patients; ++p) {
    const int images = 1 + static_cast<int>(rng.below(24));
    // append, not "p" + std::to_string(p): GCC 12 gives a false -Wrestrict warning on the latter.
    for (int i = 0; i < images; ++i) pool.push_back(std::string("p").append(std::to_string(p)));
    for (int64_t l = 0; l < d.labels; ++l) {
      offset[p].push_back(rng.normal());
      finding[p].push_back(l == 2 ? p < 2 : rng.uniform() < 0.4);
    }
  }
  for (size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[rng.below(i)]);  // interleave patients
  d.rows = static_cast<int64_t>(pool.size());
  for (const std::string& patient : pool) {
    const size_t p = static_cast<size_t>(std::stoi(patient.substr(1)));
    d.patients.push_back(patient);
    for (int64_t l = 0; l < d.labels; ++l) {
      const bool positive = l == 2 ? finding[p][l] : finding[p][l] != (rng.uniform() < 0.1);
      d.targets.push_back(positive ? 1.0f : 0.0f);
      float s = static_cast<float>(offset[p][l] + 0.5 * rng.normal() + (positive ? 1.0 : 0.0));
      if (l == 1) s = std::round(s * 2.0f) / 2.0f;  // ties
      d.scores.push_back(s);
    }
  }
  return d;
}

TEST(ClusterBootstrap, MatchesNumpyAndScikitLearnOnTheSameResamples) {
  const ClusteredData d = make_clustered(41);
  BootstrapOptions options{300, 0.95, 17};
  set_bootstrap_unit(options, BootstrapUnit::automatic, d.patients, "test data");
  ASSERT_EQ(options.unit, "patient");
  const uint32_t clusters = *std::max_element(options.cluster_of_row.begin(), options.cluster_of_row.end()) + 1;
  ASSERT_EQ(clusters, 18u);
  // The drawn patients by name: cluster c is the c-th patient to appear in row order.
  std::vector<std::string> name_of(clusters);
  for (int64_t r = 0; r < d.rows; ++r) name_of[options.cluster_of_row[r]] = d.patients[r];
  nlohmann::json draws = nlohmann::json::array();
  for (int64_t b = 0; b < options.resamples; ++b) {
    nlohmann::json names = nlohmann::json::array();
    for (const uint32_t c : bootstrap_draws(clusters, options.seed, b)) names.push_back(name_of[c]);
    draws.push_back(names);
  }
  nlohmann::json scores = nlohmann::json::array(), targets = nlohmann::json::array();
  for (int64_t r = 0; r < d.rows; ++r) {
    scores.push_back(std::vector<double>(d.scores.begin() + r * d.labels, d.scores.begin() + (r + 1) * d.labels));
    targets.push_back(std::vector<int>(d.targets.begin() + r * d.labels, d.targets.begin() + (r + 1) * d.labels));
  }
  ScratchDir dir("cluster_bootstrap");
  write_json_file(dir.path() / "cluster_input.json", {{"labels", d.labels},
                                                      {"scores", scores},
                                                      {"targets", targets},
                                                      {"patients", d.patients},
                                                      {"draws", draws},
                                                      {"confidence", options.confidence}});
  ASSERT_TRUE(run_reference_script("reference_cluster_bootstrap.py", dir.path()));
  const nlohmann::json ref = read_json_file(dir.path() / "cluster_reference.json");

  const BootstrapDistribution dist = bootstrap_distribution(d.scores, d.targets, d.labels, options);
  int64_t skipped = 0;
  for (int64_t b = 0; b < options.resamples; ++b) {
    for (int64_t l = 0; l < d.labels; ++l) {
      const nlohmann::json& auc = ref["roc_auc"][b][l];
      const nlohmann::json& ap = ref["average_precision"][b][l];
      ASSERT_EQ(auc.is_null(), !dist.roc_auc[b][l].has_value()) << "resample " << b << " label " << l;
      ASSERT_EQ(ap.is_null(), !dist.average_precision[b][l].has_value()) << "resample " << b << " label " << l;
      if (!auc.is_null()) {
        EXPECT_NEAR(*dist.roc_auc[b][l], auc.get<double>(), 1e-12) << "resample " << b;
      }
      if (!ap.is_null()) {
        EXPECT_NEAR(*dist.average_precision[b][l], ap.get<double>(), 1e-12) << "resample " << b;
      }
      skipped += auc.is_null() ? 1 : 0;
    }
  }
  EXPECT_GT(skipped, 0) << "the rare label should lack a class in some resamples";

  const EvaluationMetrics m = evaluate_multilabel(d.scores, d.targets, d.labels, options);
  for (int64_t l = 0; l < d.labels; ++l) {
    const nlohmann::json& expected = ref["roc_auc_ci"][l];
    ASSERT_TRUE(m.roc_auc.per_label_ci[l].has_value()) << "label " << l;
    const ConfidenceInterval& ci = *m.roc_auc.per_label_ci[l];
    EXPECT_NEAR(ci.low, expected["low"].get<double>(), 1e-12) << "label " << l;
    EXPECT_NEAR(ci.high, expected["high"].get<double>(), 1e-12) << "label " << l;
    EXPECT_EQ(ci.resamples, expected["resamples"].get<int64_t>()) << "label " << l;
    EXPECT_EQ(ci.skipped, expected["skipped"].get<int64_t>()) << "label " << l;
    EXPECT_EQ(ci.unit, "patient");
  }
  ASSERT_TRUE(m.roc_auc.mean_ci.has_value());
  EXPECT_NEAR(m.roc_auc.mean_ci->low, ref["mean_roc_auc_ci"]["low"].get<double>(), 1e-12);
  EXPECT_NEAR(m.roc_auc.mean_ci->high, ref["mean_roc_auc_ci"]["high"].get<double>(), 1e-12);
  EXPECT_EQ(m.roc_auc.mean_ci->skipped, ref["mean_roc_auc_ci"]["skipped"].get<int64_t>());
  const nlohmann::json j = metrics_to_json(m, {"a", "b", "rare"});
  EXPECT_EQ(j["roc_auc"]["per_label"]["rare"]["ci"]["unit"], "patient");
  EXPECT_EQ(j["roc_auc"]["per_label"]["rare"]["ci"]["skipped"], ref["roc_auc_ci"][2]["skipped"]);
}

TEST(ClusterBootstrap, PatientsWithOneImageEachGiveTheImageLevelIntervals) {
  const ClusteredData d = make_clustered(5);
  std::vector<std::string> distinct;
  for (int64_t r = 0; r < d.rows; ++r) distinct.push_back("row" + std::to_string(r));
  BootstrapOptions by_patient{200, 0.95, 3}, by_image{200, 0.95, 3};
  set_bootstrap_unit(by_patient, BootstrapUnit::patient, distinct, "test data");
  const EvaluationMetrics a = evaluate_multilabel(d.scores, d.targets, d.labels, by_patient);
  const EvaluationMetrics b = evaluate_multilabel(d.scores, d.targets, d.labels, by_image);
  for (int64_t l = 0; l < d.labels; ++l) {
    ASSERT_EQ(a.roc_auc.per_label_ci[l].has_value(), b.roc_auc.per_label_ci[l].has_value());
    if (!a.roc_auc.per_label_ci[l]) continue;
    EXPECT_EQ(a.roc_auc.per_label_ci[l]->low, b.roc_auc.per_label_ci[l]->low);
    EXPECT_EQ(a.roc_auc.per_label_ci[l]->high, b.roc_auc.per_label_ci[l]->high);
  }
  // Repeated patients: another (here wider, as images of one patient are alike) interval for the mean.
  BootstrapOptions clustered{200, 0.95, 3};
  set_bootstrap_unit(clustered, BootstrapUnit::automatic, d.patients, "test data");
  const EvaluationMetrics c = evaluate_multilabel(d.scores, d.targets, d.labels, clustered);
  EXPECT_GT(c.roc_auc.mean_ci->high - c.roc_auc.mean_ci->low, b.roc_auc.mean_ci->high - b.roc_auc.mean_ci->low);
}

TEST(ClusterBootstrap, UnitIsResolvedAndPatientsAreRequiredWhenAskedFor) {
  const std::vector<std::string> none(5, ""), some = {"a", "", "b", "a", ""};
  BootstrapOptions options{10, 0.95, 0};
  set_bootstrap_unit(options, BootstrapUnit::automatic, none, "csv:/x.csv");
  EXPECT_EQ(options.unit, "image");
  EXPECT_TRUE(options.cluster_of_row.empty());
  try {
    set_bootstrap_unit(options, BootstrapUnit::patient, none, "csv:/x.csv");
    ADD_FAILURE() << "patient without patient ids must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("csv:/x.csv has no patient ids"), std::string::npos) << e.what();
  }
  // An image without an id is its own patient; clusters numbered in order of first appearance.
  set_bootstrap_unit(options, BootstrapUnit::patient, some, "d");
  EXPECT_EQ(options.unit, "patient");
  EXPECT_EQ(options.cluster_of_row, (std::vector<uint32_t>{0, 1, 2, 0, 3}));
  set_bootstrap_unit(options, BootstrapUnit::image, some, "d");
  EXPECT_EQ(options.unit, "image");
  EXPECT_TRUE(options.cluster_of_row.empty());
  EXPECT_THROW(parse_bootstrap_unit("patients", "--bootstrap-unit"), Error);
  EXPECT_EQ(parse_bootstrap_unit("auto", "--bootstrap-unit"), BootstrapUnit::automatic);
  // Cluster ids that leave a gap would shrink resamples: refused.
  BootstrapOptions gap{10, 0.95, 0};
  gap.cluster_of_row = {0, 2, 2};
  EXPECT_THROW(evaluate_multilabel(std::vector<float>{0.1f, 0.2f, 0.3f}, std::vector<float>{0, 1, 1}, 1, gap), Error);
}

}  // namespace
}  // namespace vitpipe
