// Subgroups: every subgroup's ROC-AUC, its patient-level interval, its gap against the rest of its attribute's groups
// with the paired interval, and the paired interval of the largest gap equal a
// float64 scikit-learn + NumPy recomputation from the same drawn patients (reference_subgroups.py); age bands at their
// edges, impossible and unknown ages left out and counted; a subgroup with one class listed as too few, not dropped;
// the underdiagnosis rate on a hand-computed case.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../train/reference.h"
#include "evaluation/bootstrap_unit.h"
#include "evaluation/subgroup_attributes.h"
#include "evaluation/subgroups.h"
#include "util/random.h"

namespace vitpipe {
namespace {

using testing::read_json_file;
using testing::ScratchDir;
using testing::write_json_file;

bool run_reference(const std::filesystem::path& dir) {
  const std::string command = std::string("'") + VITPIPE_PYTHON + "' '" + VITPIPE_SOURCE_DIR +
                              "/tests/evaluation/reference_subgroups.py' '" + dir.string() + "'";
  const int status = std::system(command.c_str());
  EXPECT_EQ(status, 0) << "reference script failed: " << command;
  return status == 0;
}

// 40 patients with 1..8 images each (interleaved); sex per patient, age and view per image, some ages impossible or
// unknown; scores carry a per-patient offset and ties; label 2 is positive in 3 patients only (some subgroups lack it).
struct Data {
  int64_t rows = 0;
  std::vector<std::string> labels = {"A", "B", "C"};
  std::vector<float> scores, targets;
  std::vector<double> probabilities;
  std::vector<std::string> patients, sex, view;
  std::vector<double> age;
};

Data make_data(uint64_t seed) {
  Data d;
  Rng rng(seed);
  const int patients = 40;
  std::vector<int> pool;
  for (int p = 0; p < patients; ++p) {
    const int images = 1 + static_cast<int>(rng.below(8));
    for (int i = 0; i < images; ++i) pool.push_back(p);
  }
  for (size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[rng.below(i)]);
  std::vector<double> offset(patients), base_age(patients);
  const std::vector<std::string> sexes = {"M", "F"};
  std::vector<std::string> sex_of(patients);
  for (int p = 0; p < patients; ++p) {
    offset[p] = rng.normal();
    base_age[p] = 10 + 85 * rng.uniform();
    sex_of[p] = sexes[rng.below(2)];
  }
  d.rows = static_cast<int64_t>(pool.size());
  for (const int p : pool) {
    d.patients.push_back(std::string("p").append(std::to_string(p)));  // not "p" + ...: GCC 12 warns falsely
    d.sex.push_back(sex_of[p]);
    const double u = rng.uniform();
    d.age.push_back(u < 0.05 ? 412.0 : u < 0.08 ? -1.0 : base_age[p]);
    d.view.push_back(rng.uniform() < 0.6 ? std::string("PA") : std::string("AP"));
    for (int l = 0; l < 3; ++l) {
      const bool positive = l == 2 ? p < 3 : rng.uniform() < 0.35;
      float s = static_cast<float>(0.7 * offset[p] + rng.normal() + (positive ? 1.0 : 0.0));
      if (l == 1) s = std::round(s * 2.0f) / 2.0f;  // ties
      d.scores.push_back(s);
      d.targets.push_back(positive ? 1.0f : 0.0f);
      d.probabilities.push_back(1.0 / (1.0 + std::exp(-double{s})));
    }
  }
  return d;
}

TEST(Subgroups, AucsIntervalsAndPairedGapsEqualScikitLearn) {
  const Data d = make_data(11);
  BootstrapOptions options{60, 0.95, 5};
  set_bootstrap_unit(options, BootstrapUnit::patient, d.patients, "test");
  const std::vector<SubgroupAttribute> attributes = {sex_attribute(d.sex), age_attribute(d.age),
                                                     view_attribute(d.view)};
  const SubgroupData data{d.labels, d.scores, d.targets, {}, d.probabilities, true};
  const SubgroupAnalysis a = analyze_subgroups(attributes, data, d.patients, options, std::nullopt);

  // The drawn patients of each resample, by name (clusters are numbered in order of first appearance).
  std::vector<std::string> name_of_cluster;
  for (size_t r = 0; r < d.patients.size(); ++r)
    if (options.cluster_of_row[r] == name_of_cluster.size()) name_of_cluster.push_back(d.patients[r]);
  nlohmann::json draws = nlohmann::json::array();
  for (int64_t b = 0; b < options.resamples; ++b) {
    nlohmann::json names = nlohmann::json::array();
    for (const uint32_t c : bootstrap_draws(static_cast<int64_t>(name_of_cluster.size()), options.seed, b))
      names.push_back(name_of_cluster[c]);
    draws.push_back(names);
  }
  nlohmann::json scores = nlohmann::json::array(), targets = nlohmann::json::array(), groups, gaps;
  for (int64_t r = 0; r < d.rows; ++r) {
    scores.push_back({d.scores[r * 3], d.scores[r * 3 + 1], d.scores[r * 3 + 2]});
    targets.push_back({d.targets[r * 3], d.targets[r * 3 + 1], d.targets[r * 3 + 2]});
  }
  for (const auto& attribute : attributes) groups[attribute.name] = attribute.group_of_row;
  gaps = nlohmann::json::array();
  for (const SubgroupGap& g : a.gaps)
    gaps.push_back({{"label", g.label}, {"attribute", g.attribute}, {"high", g.high}, {"low", g.low}});
  ASSERT_FALSE(a.gaps.empty());

  ScratchDir dir("subgroups");
  write_json_file(dir.path() / "subgroups_input.json", {{"scores", scores},
                                                        {"targets", targets},
                                                        {"patients", d.patients},
                                                        {"attributes", groups},
                                                        {"draws", draws},
                                                        {"confidence", options.confidence},
                                                        {"gaps", gaps}});
  ASSERT_TRUE(run_reference(dir.path()));
  const nlohmann::json ref = read_json_file(dir.path() / "subgroups_reference.json");

  ASSERT_EQ(a.groups.size(), ref["groups"].size());  // every subgroup listed, scored or not
  int too_few = 0, against_rest = 0;
  for (const SubgroupResult& g : a.groups) {
    const nlohmann::json& r = ref["groups"][g.attribute + "=" + g.group];
    ASSERT_FALSE(r.is_null()) << g.attribute << "=" << g.group;
    EXPECT_EQ(g.images, r["images"].get<int64_t>());
    for (size_t l = 0; l < 3; ++l) {
      const std::string where = g.attribute + "=" + g.group + " label " + std::to_string(l);
      ASSERT_EQ(g.labels[l].auc.has_value(), !r["auc"][l].is_null()) << where;
      if (!g.labels[l].auc) {
        ++too_few;
        continue;
      }
      EXPECT_NEAR(*g.labels[l].auc, r["auc"][l].get<double>(), 1e-9) << where;
      ASSERT_TRUE(g.labels[l].ci && !r["ci"][l].is_null()) << where;
      EXPECT_NEAR(g.labels[l].ci->low, r["ci"][l]["low"].get<double>(), 1e-9) << where;
      EXPECT_NEAR(g.labels[l].ci->high, r["ci"][l]["high"].get<double>(), 1e-9) << where;
      EXPECT_EQ(g.labels[l].ci->skipped, r["ci"][l]["skipped"].get<int64_t>()) << where;
      EXPECT_EQ(g.labels[l].ci->unit, "patient");
      // Against the rest of the attribute's groups, paired over the same resamples.
      ASSERT_EQ(g.labels[l].rest_auc.has_value(), !r["rest"][l].is_null()) << where;
      ASSERT_EQ(g.labels[l].gap_vs_rest.has_value(), !r["rest"][l].is_null()) << where;
      if (!g.labels[l].gap_vs_rest) continue;
      ++against_rest;
      EXPECT_NEAR(*g.labels[l].rest_auc, r["rest"][l].get<double>(), 1e-9) << where;
      EXPECT_NEAR(*g.labels[l].gap_vs_rest, *g.labels[l].auc - *g.labels[l].rest_auc, 1e-15) << where;
      ASSERT_TRUE(g.labels[l].gap_vs_rest_ci && !r["gap_vs_rest_ci"][l].is_null()) << where;
      EXPECT_NEAR(g.labels[l].gap_vs_rest_ci->low, r["gap_vs_rest_ci"][l]["low"].get<double>(), 1e-9) << where;
      EXPECT_NEAR(g.labels[l].gap_vs_rest_ci->high, r["gap_vs_rest_ci"][l]["high"].get<double>(), 1e-9) << where;
      EXPECT_EQ(g.labels[l].gap_vs_rest_ci->skipped, r["gap_vs_rest_ci"][l]["skipped"].get<int64_t>()) << where;
    }
  }
  EXPECT_GT(against_rest, 10) << "most subgroups are compared with the rest";
  EXPECT_GT(too_few, 0) << "the rare label should leave some subgroup with one class";
  for (size_t k = 0; k < a.gaps.size(); ++k) {
    const SubgroupGap& g = a.gaps[k];
    ASSERT_TRUE(g.ci && !ref["gaps"][k].is_null());
    EXPECT_NEAR(g.ci->low, ref["gaps"][k]["low"].get<double>(), 1e-9) << a.labels[g.label];
    EXPECT_NEAR(g.ci->high, ref["gaps"][k]["high"].get<double>(), 1e-9) << a.labels[g.label];
    EXPECT_NEAR(g.gap, g.high_auc - g.low_auc, 1e-15);
    if (k > 0) {
      EXPECT_GE(a.gaps[k - 1].gap, g.gap) << "largest gap first";
    }
  }
  EXPECT_GT(a.left_out.at("age").at("impossible age (> 120 years)"), 0);
  EXPECT_GT(a.left_out.at("age").at("unknown"), 0);
}

TEST(Subgroups, AgeBandEdgesAndImpossibleAges) {
  EXPECT_EQ(age_band(0.0), "<40");
  EXPECT_EQ(age_band(4.0 / 12), "<40");
  EXPECT_EQ(age_band(39.99), "<40");
  EXPECT_EQ(age_band(40.0), "40-59");
  EXPECT_EQ(age_band(59.99), "40-59");
  EXPECT_EQ(age_band(60.0), "60-79");
  EXPECT_EQ(age_band(79.99), "60-79");
  EXPECT_EQ(age_band(80.0), "80+");
  EXPECT_EQ(age_band(120.0), "80+");
  EXPECT_EQ(age_band(120.5), "");
  EXPECT_EQ(age_band(412.0), "");  // NIH lists ages such as 412: excluded, not clamped into 80+
  EXPECT_EQ(age_band(-1.0), "");   // unknown
  const SubgroupAttribute a = age_attribute({25, 412, 150, -1, 85, 60});
  EXPECT_EQ(a.group_of_row, (std::vector<std::string>{"<40", "", "", "", "80+", "60-79"}));
  EXPECT_EQ(a.left_out.at("impossible age (> 120 years)"), 2);
  EXPECT_EQ(a.left_out.at("unknown"), 1);
  const SubgroupAttribute v = view_attribute({"PA", "ap", "LL", "LATERAL", ""});
  EXPECT_EQ(v.group_of_row, (std::vector<std::string>{"PA", "AP", "lateral", "lateral", ""}));
  const SubgroupAttribute s = sex_attribute({"M", "female", "O", ""});
  EXPECT_EQ(s.group_of_row, (std::vector<std::string>{"M", "F", "", ""}));
  EXPECT_EQ(s.left_out.at("unknown"), 2);
}

TEST(Subgroups, OneClassSubgroupListedAsTooFew) {
  // Group "x" has no positive for label 0; it is still listed, with its counts and no AUC.
  const std::vector<std::string> labels = {"A"};
  const std::vector<float> scores = {0.1f, 0.2f, 0.9f, 0.3f, 0.8f};
  const std::vector<float> targets = {0, 0, 1, 0, 1};
  const std::vector<double> probabilities(scores.begin(), scores.end());
  const std::vector<std::string> patients = {"a", "b", "c", "d", "e"};
  const SubgroupAttribute site = column_attribute("site", {"x", "x", "y", "y", "y"});
  const SubgroupAnalysis a = analyze_subgroups({site}, {labels, scores, targets, {}, probabilities, true}, patients,
                                               BootstrapOptions{20, 0.95, 1}, std::nullopt);
  ASSERT_EQ(a.groups.size(), 2u);
  EXPECT_EQ(a.groups[0].group, "x");
  EXPECT_FALSE(a.groups[0].labels[0].auc.has_value());
  EXPECT_EQ(a.groups[0].labels[0].positives, 0);
  EXPECT_EQ(a.groups[0].labels[0].negatives, 2);
  EXPECT_DOUBLE_EQ(*a.groups[1].labels[0].auc, 1.0);
  EXPECT_TRUE(a.gaps.empty()) << "one scored subgroup has no gap";
  const nlohmann::json j = subgroups_json(a);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_TRUE(j[0]["roc_auc"]["A"]["value"].is_null());
  EXPECT_TRUE(j[0]["roc_auc"]["A"]["too_few"].get<bool>());
  EXPECT_EQ(j[0]["images"], 2);
  EXPECT_EQ(j[0]["patients"], 2);
  EXPECT_NE(subgroups_table(a).find("few"), std::string::npos);
}

TEST(Subgroups, UnderdiagnosisAndOperatingPointsAtGivenThresholds) {
  // Two findings (and a "No Finding" label that is not a finding), thresholds 0.5. Images with a finding: 0, 1, 3;
  // called normal (every finding < 0.5): 0 and 3. Underdiagnosis 2/3.
  const std::vector<std::string> labels = {"A", "B", "No Finding"};
  const std::vector<double> probabilities = {0.2, 0.3, 0.9, 0.1, 0.7, 0.2, 0.6, 0.1, 0.9, 0.4, 0.4, 0.1};
  const std::vector<float> targets = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 0};
  const std::vector<float> scores(probabilities.begin(), probabilities.end());
  ThresholdSet t;
  t.chosen_on = "val";
  t.labels = {"A", "B", "No Finding"};
  t.youden = {0.5, 0.5, 0.05};  // "No Finding" above its threshold everywhere: ignored, else nobody is "normal"
  t.sensitivity_90 = {0.15, 0.5, 0.05};
  const SubgroupAttribute all = column_attribute("all", {"g", "g", "g", "g"});
  const SubgroupAnalysis a =
      analyze_subgroups({all}, {labels, scores, targets, {}, probabilities, true}, {"a", "b", "c", "d"}, {}, t);
  ASSERT_EQ(a.groups.size(), 1u);
  const Underdiagnosis& u = *a.groups[0].underdiagnosis;
  EXPECT_EQ(u.with_finding, 3);
  EXPECT_DOUBLE_EQ(*u.youden, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(*u.sensitivity_90, 0.0);  // A >= 0.15 for images 0 and 3
  // Label A at 0.5: positives 0 (0.2) and 3 (0.4) missed, negative 2 (0.6) flagged: TPR 0, FPR 1/2.
  const auto& p = a.groups[0].labels[0].youden;
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->tp, 0);
  EXPECT_EQ(p->fn, 2);
  EXPECT_EQ(p->fp, 1);
  EXPECT_EQ(p->tn, 1);
  const nlohmann::json j = subgroups_json(a);
  EXPECT_DOUBLE_EQ(j[0]["operating_points"]["A"]["youden"]["fpr"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j[0]["underdiagnosis"]["youden"].get<double>(), 2.0 / 3.0);
}

}  // namespace
}  // namespace vitpipe
