#include "report/card_subgroups.h"

#include <cstdio>

namespace vitpipe {
namespace {

constexpr const char* kNotEvaluated = "not evaluated";

std::string fixed(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", v);
  return text;
}

std::string cell(std::string s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

// An interval: "not evaluated" without a bootstrap, "undefined" where no resample defined it.
std::string interval(const std::optional<ConfidenceInterval>& ci, int64_t resamples) {
  if (resamples <= 0) return kNotEvaluated;
  return ci ? fixed(ci->low) + " to " + fixed(ci->high) : "undefined";
}

// TPR / FPR at one threshold: "undefined" for a rate without its denominator (no positives, no negatives).
std::string rates(const SubgroupAnalysis& a, const std::optional<OperatingPoint>& p) {
  if (!a.thresholds) return kNotEvaluated;
  if (!p) return "no threshold";
  const std::string tpr = p->tp + p->fn > 0 ? fixed(p->sensitivity()) : "undefined";
  const std::string fpr = p->tn + p->fp > 0 ? fixed(1.0 - p->specificity()) : "undefined";
  return tpr + " / " + fpr;
}

std::string underdiagnosis(const SubgroupAnalysis& a, const SubgroupResult& g, bool youden) {
  if (!a.thresholds || !g.underdiagnosis) return kNotEvaluated;
  if (g.underdiagnosis->with_finding == 0) return "undefined (no image with a finding)";
  const auto& rate = youden ? g.underdiagnosis->youden : g.underdiagnosis->sensitivity_90;
  return rate ? fixed(*rate) + " of " + std::to_string(g.underdiagnosis->with_finding) : "no threshold";
}

}  // namespace

std::string card_subgroup_section(const std::string& split, const std::optional<SubgroupAnalysis>& analysis,
                                  const std::string& not_evaluated, int64_t resamples) {
  std::string out = "## Subgroups\n\n";
  if (!analysis || analysis->groups.empty()) {
    return out + "Not evaluated: " +
           (analysis ? "the " + split + " split's predictions carry no sex, age or view per image" : not_evaluated) +
           ".\n\n";
  }
  const SubgroupAnalysis& a = *analysis;
  out += "Performance by sex, age band and view on the **" + split + "** split (its predictions, `predictions-" +
         split +
         ".csv`; `vitpipe eval --json --bootstrap N --thresholds RUN/thresholds.json` gives the same numbers on the " +
         "same predictions). ROC-AUC per subgroup with its 95% interval" +
         (resamples > 0 ? " from " + std::to_string(resamples) + " bootstrap resamples of " + a.ci_unit +
                              "s, the same resamples for every subgroup"
                        : " (intervals not evaluated)") +
         "; the gap is the subgroup's AUC minus that of the rest of the attribute's groups (images the attribute "
         "leaves out, such as an unknown age, are in neither), its interval paired over the same resamples. " +
         "\"Too few\": the subgroup lacks a positive or a negative for that finding, so no AUC.";
  if (a.thresholds) {
    out += " TPR / FPR at the thresholds chosen on the " + a.thresholds->chosen_on +
           " split (Youden's J; the highest reaching 90% sensitivity there); underdiagnosis (Seyyed-Kalantari et al., "
           "Nature Medicine 2021): of the images with at least one finding, the share with every finding below its "
           "threshold, i.e. called \"No Finding\".";
    if (a.thresholds->chosen_on == split)
      out += " The thresholds were chosen on this very split, so its rates are optimistic.";
  } else {
    out += " TPR / FPR and underdiagnosis: not evaluated (no thresholds were chosen on a validation split).";
  }
  out +=
      "\n\n| attribute | group | images | patients | underdiagnosis at Youden | at 90% sensitivity |\n"
      "| --- | --- | ---: | ---: | ---: | ---: |\n";
  for (const SubgroupResult& g : a.groups) {
    out += "| " + cell(g.attribute) + " | " + cell(g.group) + " | " + std::to_string(g.images) + " | " +
           std::to_string(g.patients) + " | " + underdiagnosis(a, g, true) + " | " + underdiagnosis(a, g, false) +
           " |\n";
  }
  std::string left_out;
  for (const auto& [attribute, reasons] : a.left_out)
    for (const auto& [reason, images] : reasons)
      left_out += (left_out.empty() ? "" : "; ") + attribute + ": " + std::to_string(images) + " (" + reason + ")";
  out += "\nImages left out of an attribute: " + (left_out.empty() ? std::string("none") : left_out) + ".\n\n";

  if (!a.gaps.empty()) {
    out +=
        "The largest gap per finding (highest minus lowest subgroup AUC of one attribute):\n\n"
        "| finding | attribute | highest | lowest | gap | 95% CI |\n| --- | --- | --- | --- | ---: | --- |\n";
    for (const SubgroupGap& gap : a.gaps) {
      out += "| " + cell(a.labels[gap.label]) + " | " + cell(gap.attribute) + " | " + cell(gap.high) + " " +
             fixed(gap.high_auc) + " | " + cell(gap.low) + " " + fixed(gap.low_auc) + " | " + fixed(gap.gap) + " | " +
             interval(gap.ci, resamples) + " |\n";
    }
    out += "\n";
  }

  out +=
      "<details><summary>Every finding by subgroup</summary>\n\n"
      "| finding | attribute | group | positives / negatives | ROC-AUC | 95% CI | gap vs the rest | 95% CI | "
      "TPR / FPR at Youden | TPR / FPR at 90% sensitivity |\n"
      "| --- | --- | --- | ---: | ---: | --- | ---: | --- | --- | --- |\n";
  for (size_t l = 0; l < a.labels.size(); ++l) {
    for (const SubgroupResult& g : a.groups) {
      const SubgroupLabel& x = g.labels[l];
      out += "| " + cell(a.labels[l]) + " | " + cell(g.attribute) + " | " + cell(g.group) + " | " +
             std::to_string(x.positives) + " / " + std::to_string(x.negatives) + " | " +
             (x.auc ? fixed(*x.auc) : std::string("too few")) + " | " +
             (x.auc ? interval(x.ci, resamples) : std::string()) + " | " +
             (x.gap_vs_rest ? fixed(*x.gap_vs_rest) : std::string("undefined")) + " | " +
             (x.gap_vs_rest ? interval(x.gap_vs_rest_ci, resamples) : std::string()) + " | " + rates(a, x.youden) +
             " | " + rates(a, x.sensitivity_90) + " |\n";
    }
  }
  return out + "\n</details>\n\n";
}

}  // namespace vitpipe
