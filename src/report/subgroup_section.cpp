#include "report/subgroup_section.h"

#include <cstdio>

#include "report/svg_chart.h"

namespace vitpipe {
namespace {

std::string num(double value, const char* pattern = "%.3f") {
  char text[40];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

// One finding's forest plot: a row for the whole split, then one per subgroup; AUC from 0 to 1 across.
std::string forest_plot(const SubgroupAnalysis& a, size_t label) {
  const double left = 118, right = 300, top = 30, row = 17;
  const size_t rows = 1 + a.groups.size();
  const double height = top + row * static_cast<double>(rows) + 26;
  auto x = [&](double auc) { return left + (right - left) * auc; };
  std::string svg = "<svg class=\"chart forest\" id=\"forest-" + std::to_string(label) +
                    "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"316\" height=\"" + num(height, "%.0f") +
                    "\" viewBox=\"0 0 316 " + num(height, "%.0f") + "\" data-rows=\"" + std::to_string(rows) +
                    "\" role=\"img\" aria-label=\"" + html_escape(a.labels[label]) + " ROC-AUC by subgroup\">\n";
  svg += "<text class=\"chart-title\" x=\"8\" y=\"16\">" + html_escape(a.labels[label]) + "</text>\n";
  const double bottom = top + row * static_cast<double>(rows);
  for (const double tick : {0.0, 0.5, 1.0}) {
    svg += "<line class=\"" + std::string(tick == 0.5 ? "reference" : "grid") + "\" x1=\"" + num(x(tick), "%.1f") +
           "\" x2=\"" + num(x(tick), "%.1f") + "\" y1=\"" + num(top - 4, "%.1f") + "\" y2=\"" + num(bottom, "%.1f") +
           "\"/>\n<text class=\"tick\" text-anchor=\"middle\" x=\"" + num(x(tick), "%.1f") + "\" y=\"" +
           num(bottom + 12, "%.1f") + "\">" + num(tick, "%.1f") + "</text>\n";
  }
  svg += "<text class=\"axis-label\" text-anchor=\"middle\" x=\"" + num(x(0.5), "%.1f") + "\" y=\"" +
         num(bottom + 24, "%.1f") + "\">ROC-AUC (95% CI)</text>\n";
  const auto& overall = a.overall_auc[label];
  if (overall) {
    svg += "<line class=\"overall\" stroke=\"#9aa3ad\" x1=\"" + num(x(*overall), "%.1f") + "\" x2=\"" +
           num(x(*overall), "%.1f") + "\" y1=\"" + num(top - 4, "%.1f") + "\" y2=\"" + num(bottom, "%.1f") + "\"/>\n";
  }
  auto draw = [&](size_t r, const std::string& name, const std::optional<double>& auc,
                  const std::optional<ConfidenceInterval>& ci, const std::string& color, int64_t positives,
                  int64_t negatives) {
    const double y = top + row * (static_cast<double>(r) + 0.5);
    svg += "<text class=\"tick\" x=\"8\" y=\"" + num(y + 3.5, "%.1f") + "\">" + html_escape(name) + "</text>\n";
    if (!auc) {
      svg += "<text class=\"tick too-few\" x=\"" + num(left + 4, "%.1f") + "\" y=\"" + num(y + 3.5, "%.1f") +
             "\">too few: " + std::to_string(positives) + " pos, " + std::to_string(negatives) + " neg</text>\n";
      return;
    }
    std::string title = name + ": " + num(*auc);
    if (ci) {
      title += " (" + num(ci->low) + "-" + num(ci->high) + ")";
      svg += "<line stroke=\"" + color + "\" stroke-width=\"1.6\" x1=\"" + num(x(ci->low), "%.1f") + "\" x2=\"" +
             num(x(ci->high), "%.1f") + "\" y1=\"" + num(y, "%.1f") + "\" y2=\"" + num(y, "%.1f") + "\"/>\n";
    }
    svg += "<circle class=\"estimate\" fill=\"" + color + "\" cx=\"" + num(x(*auc), "%.1f") + "\" cy=\"" +
           num(y, "%.1f") + "\" r=\"3.2\"><title>" + html_escape(title) + "</title></circle>\n";
  };
  draw(0, "all images", overall, a.overall_ci[label], kChartColors[6], 0, 0);
  for (size_t g = 0; g < a.groups.size(); ++g) {
    const SubgroupResult& s = a.groups[g];
    const SubgroupLabel& l = s.labels[label];
    draw(g + 1, s.attribute + " " + s.group, l.auc, l.ci, kChartColors[0], l.positives, l.negatives);
  }
  return svg + "</svg>\n";
}

std::string cell(const std::string& text) { return "<td>" + html_escape(text) + "</td>"; }

}  // namespace

std::string subgroup_section(const std::string& split, const SubgroupAnalysis& a) {
  if (a.groups.empty()) return "";
  std::string out = "<section id=\"subgroups\"><h2>Subgroups (" + html_escape(split) + " split)</h2>\n";
  out +=
      "<p class=\"note\">ROC-AUC of each finding within each subgroup (sex, age band, view, a csv's --subgroup "
      "columns) " +
      std::string(a.ci_unit.empty() ? "without intervals" : "with 95% intervals from resampling " + a.ci_unit + "s") +
      "; every subgroup is scored on the same resamples, so a gap's interval is paired. A subgroup with no "
      "positive or no negative image of a finding has no AUC and is shown as too few. Labels were mined from "
      "radiology reports by NLP, and small subgroups (a handful of patients) say nothing clinical: read the "
      "intervals before the points.</p>\n";
  if (!a.gaps.empty()) {
    out +=
        "<table id=\"subgroup-gaps\"><tr><th>finding</th><th>attribute</th><th>highest</th><th>lowest</th>"
        "<th>gap</th><th>95% CI</th></tr>\n";
    for (const SubgroupGap& g : a.gaps) {
      out += "<tr>" + cell(a.labels[g.label]) + cell(g.attribute) + cell(g.high + " " + num(g.high_auc)) +
             cell(g.low + " " + num(g.low_auc)) + cell(num(g.gap)) +
             cell(g.ci ? num(g.ci->low) + " to " + num(g.ci->high) : "") + "</tr>\n";
    }
    out += "</table>\n";
  }
  out += "<table id=\"subgroup-sizes\"><tr><th>subgroup</th><th>images</th><th>patients</th>";
  const bool underdiagnosis = !a.groups.empty() && a.groups.front().underdiagnosis.has_value();
  if (underdiagnosis) out += "<th>images with a finding</th><th>underdiagnosis (Youden)</th><th>(90% sens.)</th>";
  out += "</tr>\n";
  for (const SubgroupResult& g : a.groups) {
    out +=
        "<tr>" + cell(g.attribute + " " + g.group) + cell(std::to_string(g.images)) + cell(std::to_string(g.patients));
    if (underdiagnosis) {
      const Underdiagnosis& u = *g.underdiagnosis;
      out += cell(std::to_string(u.with_finding)) + cell(u.youden ? num(*u.youden) : "n/a") +
             cell(u.sensitivity_90 ? num(*u.sensitivity_90) : "n/a");
    }
    out += "</tr>\n";
  }
  out += "</table>\n";
  if (underdiagnosis) {
    out +=
        "<p class=\"note\">Underdiagnosis (Seyyed-Kalantari et al., Nature Medicine 2021): of the images with at "
        "least one finding, the share the model calls \"No Finding\" (every finding below its threshold, chosen "
        "on the " +
        html_escape(a.thresholds->chosen_on) + " split).</p>\n";
  }
  std::string left_out;
  for (const auto& [attribute, reasons] : a.left_out)
    for (const auto& [reason, images] : reasons)
      left_out +=
          (left_out.empty() ? "" : "; ") + attribute + ": " + std::to_string(images) + " images (" + reason + ")";
  if (!left_out.empty()) out += "<p class=\"note\">Left out: " + html_escape(left_out) + ".</p>\n";
  out += "<div class=\"grid\" id=\"forest-plots\">\n";
  for (size_t l = 0; l < a.labels.size(); ++l) out += forest_plot(a, l);
  return out + "</div></section>\n";
}

}  // namespace vitpipe
