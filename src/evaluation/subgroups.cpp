#include "evaluation/subgroups.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "data/chestxray14_findings.h"
#include "util/error.h"

namespace vitpipe {
namespace {

nlohmann::json optional_json(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

nlohmann::json ci_json(const std::optional<ConfidenceInterval>& ci) {
  if (!ci) return nullptr;
  return {
      {"low", ci->low}, {"high", ci->high}, {"unit", ci->unit}, {"resamples", ci->resamples}, {"skipped", ci->skipped}};
}

// The percentile interval of the defined values among `total` resamples (metrics.h's rule).
std::optional<ConfidenceInterval> interval_of(const std::vector<double>& values, int64_t total,
                                              const BootstrapOptions& options) {
  if (values.empty()) return std::nullopt;
  const double percent = 100.0 * options.confidence;
  ConfidenceInterval ci;
  ci.low = percentile(values, (100.0 - percent) / 2.0);
  ci.high = percentile(values, (100.0 + percent) / 2.0);
  ci.resamples = static_cast<int64_t>(values.size());
  ci.skipped = total - ci.resamples;
  ci.unit = options.unit;
  return ci;
}

// The rows of one subgroup: copies of their scores, targets, weights and probabilities.
struct Subset {
  std::vector<float> scores, targets, weights;
  std::vector<double> probabilities;
};

Subset take_rows(const SubgroupData& data, const std::vector<size_t>& rows) {
  const size_t labels = data.labels.size();
  Subset s;
  for (const size_t r : rows) {
    for (size_t l = 0; l < labels; ++l) {
      const size_t i = r * labels + l;
      s.scores.push_back(data.scores[i]);
      s.targets.push_back(data.targets[i]);
      s.weights.push_back(data.weights.empty() ? 1.0f : data.weights[i]);
      s.probabilities.push_back(data.probabilities[i]);
    }
  }
  return s;
}

// A label's threshold of one kind, by name; nullopt where the set lacks the label or it is undefined.
std::optional<double> threshold_of(const ThresholdSet& t, const std::string& label, bool youden) {
  for (size_t k = 0; k < t.labels.size(); ++k) {
    if (t.labels[k] == label) return youden ? t.youden[k] : t.sensitivity_90[k];
  }
  return std::nullopt;
}

// Seyyed-Kalantari et al.'s underdiagnosis on a subgroup's rows: images with every finding known and at least one
// positive; "No Finding" (a label of its own with --add-no-finding) is not a finding.
Underdiagnosis underdiagnosis(const SubgroupData& data, const Subset& s, const ThresholdSet& t) {
  const size_t labels = data.labels.size();
  const size_t rows = labels ? s.targets.size() / labels : 0;
  std::vector<size_t> findings;
  for (size_t l = 0; l < labels; ++l)
    if (data.labels[l] != kNoFindingLabel) findings.push_back(l);
  Underdiagnosis u;
  int64_t missed[2] = {0, 0};
  std::vector<std::optional<double>> thresholds[2];
  for (int kind = 0; kind < 2; ++kind)
    for (const size_t l : findings) thresholds[kind].push_back(threshold_of(t, data.labels[l], kind == 0));
  for (size_t r = 0; r < rows; ++r) {
    bool known = true, positive = false;
    for (const size_t l : findings) {
      known = known && s.weights[r * labels + l] != 0.0f;
      positive = positive || s.targets[r * labels + l] == 1.0f;
    }
    if (!known || !positive) continue;
    ++u.with_finding;
    for (int kind = 0; kind < 2; ++kind) {
      bool called_normal = true;
      for (size_t f = 0; f < findings.size(); ++f) {
        const auto& th = thresholds[kind][f];
        if (th && s.probabilities[r * labels + findings[f]] >= *th) called_normal = false;
      }
      missed[kind] += called_normal ? 1 : 0;
    }
  }
  for (int kind = 0; kind < 2; ++kind) {
    const bool any = std::any_of(thresholds[kind].begin(), thresholds[kind].end(), [](const auto& x) { return x; });
    if (!any || u.with_finding == 0) continue;
    (kind == 0 ? u.youden : u.sensitivity_90) = static_cast<double>(missed[kind]) / static_cast<double>(u.with_finding);
  }
  return u;
}

nlohmann::json point_json(const std::optional<OperatingPoint>& p) {
  if (!p) return nullptr;
  return {{"threshold", p->threshold},
          {"tpr", p->sensitivity()},
          {"fpr", 1.0 - p->specificity()},
          {"tp", p->tp},
          {"fp", p->fp},
          {"tn", p->tn},
          {"fn", p->fn}};
}

std::string cell(const char* pattern, double v) {
  char text[32];
  std::snprintf(text, sizeof(text), pattern, v);
  return text;
}

}  // namespace

SubgroupAnalysis analyze_subgroups(const std::vector<SubgroupAttribute>& attributes, const SubgroupData& data,
                                   const std::vector<std::string>& patients,
                                   const std::optional<BootstrapOptions>& bootstrap,
                                   const std::optional<ThresholdSet>& thresholds) {
  const size_t labels = data.labels.size();
  VP_REQUIRE(labels > 0, "subgroups: no labels");
  const size_t rows = data.scores.size() / labels;
  VP_REQUIRE(data.targets.size() == data.scores.size() && data.probabilities.size() == data.scores.size() &&
                 (data.weights.empty() || data.weights.size() == data.scores.size()) && patients.size() == rows,
             "subgroups: scores, targets, weights, probabilities and patients disagree on the rows");
  SubgroupAnalysis out;
  out.labels = data.labels;
  out.thresholds = thresholds;
  if (bootstrap) out.ci_unit = bootstrap->unit;
  const EvaluationMetrics overall =
      evaluate_multilabel(data.scores, data.targets, static_cast<int64_t>(labels), bootstrap, data.weights);
  out.overall_auc = overall.roc_auc.per_label;
  out.overall_ci = overall.roc_auc.per_label_ci;
  if (out.overall_ci.empty()) out.overall_ci.resize(labels);

  // Per-resample AUCs of each subgroup, [group][resample][label], for the paired gaps.
  std::vector<std::vector<std::vector<std::optional<double>>>> draws;
  for (const SubgroupAttribute& attribute : attributes) {
    VP_REQUIRE(attribute.group_of_row.size() == rows, "subgroups: attribute ", attribute.name, " has ",
               attribute.group_of_row.size(), " rows, the data ", rows);
    if (!any_grouped(attribute)) continue;
    out.left_out[attribute.name] = attribute.left_out;
    const size_t first = out.groups.size();
    std::set<std::string> present(attribute.group_of_row.begin(), attribute.group_of_row.end());
    present.erase("");
    std::vector<std::string> groups;  // attribute.order first, then the rest alphabetically
    for (const std::string& g : attribute.order)
      if (present.erase(g)) groups.push_back(g);
    groups.insert(groups.end(), present.begin(), present.end());
    for (const std::string& group : groups) {
      SubgroupResult g;
      g.attribute = attribute.name;
      g.group = group;
      std::vector<size_t> members;
      std::set<std::string> who;
      // Whole-split weights that keep only this subgroup: the resamples stay the whole split's.
      std::vector<float> weights(data.scores.size(), 0.0f);
      for (size_t r = 0; r < rows; ++r) {
        if (attribute.group_of_row[r] != group) continue;
        members.push_back(r);
        // An image without a patient id is a patient of its own (append: GCC 12 warns falsely on "x" + string).
        who.insert(patients[r].empty() ? std::string("\x01").append(std::to_string(r)) : patients[r]);
        for (size_t l = 0; l < labels; ++l)
          weights[r * labels + l] = data.weights.empty() ? 1.0f : data.weights[r * labels + l];
      }
      g.images = static_cast<int64_t>(members.size());
      g.patients = static_cast<int64_t>(who.size());
      const EvaluationMetrics m =
          evaluate_multilabel(data.scores, data.targets, static_cast<int64_t>(labels), std::nullopt, weights);
      g.labels.resize(labels);
      for (size_t l = 0; l < labels; ++l) {
        g.labels[l].auc = m.roc_auc.per_label[l];
        g.labels[l].positives = m.positives[l];
        g.labels[l].negatives = m.known[l] - m.positives[l];
      }
      // The rest of the attribute's grouped images, scored the same way, for the gap against them.
      std::vector<float> rest_weights(data.scores.size(), 0.0f);
      for (size_t r = 0; r < rows; ++r) {
        if (attribute.group_of_row[r].empty() || attribute.group_of_row[r] == group) continue;
        for (size_t l = 0; l < labels; ++l)
          rest_weights[r * labels + l] = data.weights.empty() ? 1.0f : data.weights[r * labels + l];
      }
      const EvaluationMetrics rest =
          evaluate_multilabel(data.scores, data.targets, static_cast<int64_t>(labels), std::nullopt, rest_weights);
      for (size_t l = 0; l < labels; ++l) {
        g.labels[l].rest_auc = rest.roc_auc.per_label[l];
        if (g.labels[l].auc && g.labels[l].rest_auc) g.labels[l].gap_vs_rest = *g.labels[l].auc - *g.labels[l].rest_auc;
      }
      if (bootstrap) {
        BootstrapDistribution dist =
            bootstrap_distribution(data.scores, data.targets, static_cast<int64_t>(labels), *bootstrap, weights);
        const BootstrapDistribution rest_dist =
            bootstrap_distribution(data.scores, data.targets, static_cast<int64_t>(labels), *bootstrap, rest_weights);
        for (size_t l = 0; l < labels; ++l) {
          if (!g.labels[l].auc) continue;
          std::vector<double> values, gaps;
          for (size_t b = 0; b < dist.roc_auc.size(); ++b) {
            const auto& own = dist.roc_auc[b][l];
            if (own) values.push_back(*own);
            if (own && b < rest_dist.roc_auc.size() && rest_dist.roc_auc[b][l])
              gaps.push_back(*own - *rest_dist.roc_auc[b][l]);
          }
          g.labels[l].ci = interval_of(values, bootstrap->resamples, *bootstrap);
          if (g.labels[l].gap_vs_rest) g.labels[l].gap_vs_rest_ci = interval_of(gaps, bootstrap->resamples, *bootstrap);
        }
        draws.push_back(std::move(dist.roc_auc));
      }
      if (thresholds) {
        const Subset s = take_rows(data, members);
        const std::vector<LabelOperatingPoints> points =
            apply_thresholds(*thresholds, data.labels, s.probabilities, s.targets, s.weights);
        for (size_t l = 0; l < labels; ++l) {
          g.labels[l].youden = points[l].youden;
          g.labels[l].sensitivity_90 = points[l].sensitivity_90;
        }
        if (data.multi_label) g.underdiagnosis = underdiagnosis(data, s, *thresholds);
      }
      out.groups.push_back(std::move(g));
    }
    // This attribute's gap per finding: highest minus lowest AUC among its scored subgroups.
    for (size_t l = 0; l < labels; ++l) {
      std::optional<size_t> high, low;
      for (size_t k = first; k < out.groups.size(); ++k) {
        const auto& auc = out.groups[k].labels[l].auc;
        if (!auc) continue;
        if (!high || *auc > *out.groups[*high].labels[l].auc) high = k;
        if (!low || *auc < *out.groups[*low].labels[l].auc) low = k;
      }
      if (!high || *high == *low) continue;
      SubgroupGap gap;
      gap.label = l;
      gap.attribute = attribute.name;
      gap.high = out.groups[*high].group;
      gap.low = out.groups[*low].group;
      gap.high_auc = *out.groups[*high].labels[l].auc;
      gap.low_auc = *out.groups[*low].labels[l].auc;
      gap.gap = gap.high_auc - gap.low_auc;
      if (bootstrap) {
        std::vector<double> values;
        for (int64_t b = 0; b < bootstrap->resamples; ++b) {
          const auto& h = draws[*high][static_cast<size_t>(b)][l];
          const auto& w = draws[*low][static_cast<size_t>(b)][l];
          if (h && w) values.push_back(*h - *w);
        }
        gap.ci = interval_of(values, bootstrap->resamples, *bootstrap);
      }
      // Keep only the finding's largest gap over attributes.
      auto same = std::find_if(out.gaps.begin(), out.gaps.end(), [&](const SubgroupGap& g) { return g.label == l; });
      if (same == out.gaps.end()) {
        out.gaps.push_back(std::move(gap));
      } else if (gap.gap > same->gap) {
        *same = std::move(gap);
      }
    }
  }
  std::stable_sort(out.gaps.begin(), out.gaps.end(),
                   [](const SubgroupGap& a, const SubgroupGap& b) { return a.gap > b.gap; });
  return out;
}

nlohmann::json subgroups_json(const SubgroupAnalysis& analysis) {
  nlohmann::json all = nlohmann::json::array();
  for (const SubgroupResult& g : analysis.groups) {
    nlohmann::json auc = nlohmann::json::object(), points = nlohmann::json::object();
    for (size_t l = 0; l < analysis.labels.size(); ++l) {
      const SubgroupLabel& x = g.labels[l];
      auc[analysis.labels[l]] = {{"value", optional_json(x.auc)},
                                 {"ci", ci_json(x.ci)},
                                 {"positives", x.positives},
                                 {"negatives", x.negatives},
                                 {"too_few", !x.auc.has_value()},
                                 {"rest", optional_json(x.rest_auc)},
                                 {"gap_vs_rest", optional_json(x.gap_vs_rest)},
                                 {"gap_vs_rest_ci", ci_json(x.gap_vs_rest_ci)}};
      points[analysis.labels[l]] = {{"youden", point_json(x.youden)}, {"sensitivity_90", point_json(x.sensitivity_90)}};
    }
    nlohmann::json j = {{"attribute", g.attribute}, {"group", g.group}, {"images", g.images},
                        {"patients", g.patients},   {"roc_auc", auc},   {"operating_points", nullptr},
                        {"underdiagnosis", nullptr}};
    if (analysis.thresholds) j["operating_points"] = points;
    if (g.underdiagnosis) {
      j["underdiagnosis"] = {{"images_with_finding", g.underdiagnosis->with_finding},
                             {"youden", optional_json(g.underdiagnosis->youden)},
                             {"sensitivity_90", optional_json(g.underdiagnosis->sensitivity_90)}};
    }
    all.push_back(std::move(j));
  }
  return all;
}

nlohmann::json subgroup_gaps_json(const SubgroupAnalysis& analysis) {
  nlohmann::json all = nlohmann::json::array();
  for (const SubgroupGap& gap : analysis.gaps) {
    all.push_back({{"finding", analysis.labels[gap.label]},
                   {"attribute", gap.attribute},
                   {"high", {{"group", gap.high}, {"auc", gap.high_auc}}},
                   {"low", {{"group", gap.low}, {"auc", gap.low_auc}}},
                   {"gap", gap.gap},
                   {"ci", ci_json(gap.ci)}});
  }
  return all;
}

nlohmann::json subgroup_left_out_json(const SubgroupAnalysis& analysis) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [attribute, reasons] : analysis.left_out) j[attribute] = reasons;
  return j;
}

std::string subgroups_table(const SubgroupAnalysis& a) {
  std::ostringstream out;
  if (a.groups.empty()) return "subgroups: none (the data has no sex, age or view per image)\n";
  char line[512];
  const std::string unit = a.ci_unit.empty() ? "" : ", 95% CI resampling " + a.ci_unit + "s";
  out << "subgroups: ROC-AUC per subgroup" << unit << "; \"few\": too few positives or negatives for an AUC\n";
  if (!a.gaps.empty()) {
    out << "largest gap per finding (high - low, paired over the same resamples):\n";
    std::snprintf(line, sizeof(line), "  %-20s %-9s %-16s %-16s %7s%s\n", "finding", "attribute", "high", "low", "gap",
                  a.ci_unit.empty() ? "" : "   95% CI");
    out << line;
    for (const SubgroupGap& g : a.gaps) {
      const std::string ci = g.ci ? cell("   [%.3f, ", g.ci->low) + cell("%.3f]", g.ci->high) : "";
      std::snprintf(line, sizeof(line), "  %-20s %-9s %-16s %-16s %7.3f%s\n", a.labels[g.label].c_str(),
                    g.attribute.c_str(), (g.high + " " + cell("%.3f", g.high_auc)).c_str(),
                    (g.low + " " + cell("%.3f", g.low_auc)).c_str(), g.gap, ci.c_str());
      out << line;
    }
  }
  // One column per subgroup, findings down the side: the AUCs, then TPR/FPR at the Youden threshold.
  auto header = [&](const char* first) {
    std::snprintf(line, sizeof(line), "  %-20s", first);
    std::string h = line;
    for (const SubgroupResult& g : a.groups) {
      std::snprintf(line, sizeof(line), " %11s", (g.attribute.substr(0, 4) + ":" + g.group).substr(0, 11).c_str());
      h += line;
    }
    return h + "\n";
  };
  out << header("images (patients)");
  std::string counts = "  " + std::string(20, ' ');
  for (const SubgroupResult& g : a.groups) {
    std::snprintf(line, sizeof(line), " %11s",
                  (std::to_string(g.images) + " (" + std::to_string(g.patients) + ")").c_str());
    counts += line;
  }
  out << counts << "\n";
  for (size_t l = 0; l < a.labels.size(); ++l) {
    std::snprintf(line, sizeof(line), "  %-20s", a.labels[l].substr(0, 20).c_str());
    std::string row = line;
    for (const SubgroupResult& g : a.groups) {
      const auto& auc = g.labels[l].auc;
      row += auc ? cell(" %11.3f", *auc) : std::string("         few");
    }
    out << row << "\n";
  }
  if (a.thresholds) {
    out << "TPR/FPR at the Youden threshold chosen on the " << a.thresholds->chosen_on << " split:\n";
    for (size_t l = 0; l < a.labels.size(); ++l) {
      std::snprintf(line, sizeof(line), "  %-20s", a.labels[l].substr(0, 20).c_str());
      std::string row = line;
      for (const SubgroupResult& g : a.groups) {
        const auto& p = g.labels[l].youden;
        const bool defined = p && p->tp + p->fn > 0 && p->tn + p->fp > 0;
        row += defined ? cell(" %5.2f", p->sensitivity()) + cell("/%5.2f", 1.0 - p->specificity())
                       : std::string("         n/a");
      }
      out << row << "\n";
    }
    if (!a.groups.empty() && a.groups.front().underdiagnosis) {
      std::string row = "  " + std::string("underdiagnosis") + std::string(6, ' ');
      for (const SubgroupResult& g : a.groups) {
        const auto& u = g.underdiagnosis;
        row += u && u->youden ? cell(" %11.3f", *u->youden) : std::string("         n/a");
      }
      out << row << "\n  (underdiagnosis: share of images with >= 1 finding that the model calls \"No Finding\")\n";
    }
  }
  for (const auto& [attribute, reasons] : a.left_out) {
    for (const auto& [reason, images] : reasons)
      out << "  " << attribute << ": " << images << " images left out (" << reason << ")\n";
  }
  return out.str();
}

}  // namespace vitpipe
