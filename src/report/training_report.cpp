#include "report/training_report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <set>

#include "evaluation/calibration.h"
#include "evaluation/curves.h"
#include "evaluation/operating_point.h"
#include "evaluation/ranking_metrics.h"
#include "evaluation/subgroup_attributes.h"
#include "evaluation/subgroups.h"
#include "report/subgroup_section.h"
#include "report/svg_chart.h"
#include "util/atomic_file.h"
#include "util/base64.h"
#include "util/error.h"
#include "util/json_error_detail.h"
#include "util/median.h"

namespace vitpipe {
namespace fs = std::filesystem;

namespace {

// ---- formatting ----

std::string fmt(double value, const char* pattern = "%.3f") {
  if (!std::isfinite(value)) return "n/a";
  char text[64];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

std::string fmt(const std::optional<double>& value, const char* pattern = "%.3f") {
  return value ? fmt(*value, pattern) : "n/a";
}

std::string percent(double value) { return fmt(100.0 * value, "%.1f%%"); }

std::string interval(const std::optional<ConfidenceInterval>& ci) {
  return ci ? fmt(ci->low) + "&ndash;" + fmt(ci->high) : "";
}

nlohmann::json optional_json(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

nlohmann::json interval_json(const std::optional<ConfidenceInterval>& ci) {
  return ci ? nlohmann::json::array({ci->low, ci->high}) : nlohmann::json();
}

// ---- one split's numbers ----

struct LabelSummary {
  std::string label;
  int64_t positives = 0, known = 0;
  std::optional<double> auc, ap;
  std::optional<ConfidenceInterval> auc_ci, ap_ci;
  std::optional<OperatingPoint> youden, sensitive;
  double ece = 0;
  std::vector<CurvePoint> roc, pr;
};

struct SplitSummary {
  std::string name;
  int64_t rows = 0, patients = 0;
  std::string ci_unit;      // what the bootstrap resampled: "patient" or "image"
  ThresholdSet thresholds;  // where the operating points' thresholds come from
  bool optimistic = false;  // they were tuned on this split itself
  std::vector<LabelSummary> labels;
  std::optional<double> mean_auc, mean_ap;
  std::optional<ConfidenceInterval> mean_auc_ci, mean_ap_ci;
  Calibration calibration;  // every known (image, label) pair
};

// `thresholds`: chosen on another split (or read from a file); nullopt: chosen on this split itself.
SplitSummary summarize(const std::string& name, const PredictionsTable& p, const ReportOptions& options,
                       const std::optional<ThresholdSet>& thresholds) {
  SplitSummary s;
  s.name = name;
  s.rows = static_cast<int64_t>(p.rows());
  s.patients = static_cast<int64_t>(std::set<std::string>(p.patients.begin(), p.patients.end()).size());
  const size_t labels = p.labels.size();
  // The same metrics code and float scores as `vitpipe eval`, so the numbers are eval's.
  const std::vector<float> scores(p.scores.begin(), p.scores.end());
  std::optional<BootstrapOptions> bootstrap;
  if (options.bootstrap > 0) {
    bootstrap = BootstrapOptions{options.bootstrap, 0.95, options.seed};
    set_bootstrap_unit(*bootstrap, options.bootstrap_unit, p.patients, p.source);
    s.ci_unit = bootstrap->unit;
  }
  s.thresholds = thresholds ? *thresholds : choose_thresholds(p.labels, p.probabilities, p.targets, p.weights, name);
  s.optimistic = tuned_on(s.thresholds, name, "");
  const std::vector<LabelOperatingPoints> points =
      apply_thresholds(s.thresholds, p.labels, p.probabilities, p.targets, p.weights);
  const EvaluationMetrics m =
      evaluate_multilabel(scores, p.targets, static_cast<int64_t>(labels), bootstrap,
                          p.has_unknown ? std::span<const float>(p.weights) : std::span<const float>());
  s.mean_auc = m.roc_auc.mean;
  s.mean_ap = m.average_precision.mean;
  s.mean_auc_ci = m.roc_auc.mean_ci;
  s.mean_ap_ci = m.average_precision.mean_ci;
  s.calibration = calibration(p.probabilities, p.targets, p.weights);
  for (size_t l = 0; l < labels; ++l) {
    std::vector<double> column(p.rows()), probability(p.rows());
    std::vector<float> target(p.rows()), weight(p.rows());
    for (size_t r = 0; r < p.rows(); ++r) {
      column[r] = p.scores[r * labels + l];
      probability[r] = p.probabilities[r * labels + l];
      target[r] = p.targets[r * labels + l];
      weight[r] = p.weights[r * labels + l];
    }
    LabelSummary ls;
    ls.label = p.labels[l];
    ls.positives = m.positives[l];
    ls.known = m.known.empty() ? s.rows : m.known[l];
    ls.auc = m.roc_auc.per_label[l];
    ls.ap = m.average_precision.per_label[l];
    if (!m.roc_auc.per_label_ci.empty()) ls.auc_ci = m.roc_auc.per_label_ci[l];
    if (!m.average_precision.per_label_ci.empty()) ls.ap_ci = m.average_precision.per_label_ci[l];
    const RankedLabel ranked = rank_label(column, target, weight);
    ls.roc = roc_curve(ranked);
    ls.pr = pr_curve(ranked);
    ls.youden = points[l].youden;
    ls.sensitive = points[l].sensitivity_90;
    ls.ece = calibration(probability, target, weight).expected_calibration_error;
    s.labels.push_back(std::move(ls));
  }
  return s;
}

nlohmann::json split_json(const SplitSummary& s) {
  nlohmann::json auc = nlohmann::json::object(), auc_ci = nlohmann::json::object(), ap = nlohmann::json::object(),
                 per_label = nlohmann::json::object();
  for (const LabelSummary& l : s.labels) {
    auc[l.label] = optional_json(l.auc);
    auc_ci[l.label] = interval_json(l.auc_ci);
    ap[l.label] = optional_json(l.ap);
    per_label[l.label] = {{"positives", l.positives},
                          {"known", l.known},
                          {"ece", l.ece},
                          {"roc_points", l.roc.size()},
                          {"pr_points", l.pr.size()},
                          {"auc_ci_skipped", l.auc_ci ? nlohmann::json(l.auc_ci->skipped) : nlohmann::json()},
                          {"youden", operating_point_json(l.youden)},
                          {"sensitivity_90", operating_point_json(l.sensitive)}};
  }
  nlohmann::json bins = nlohmann::json::array();
  for (const CalibrationBin& b : s.calibration.bins) {
    bins.push_back({{"low", b.low},
                    {"high", b.high},
                    {"count", b.count},
                    {"mean_probability", b.mean_probability},
                    {"fraction_positive", b.fraction_positive}});
  }
  return {{"rows", s.rows},
          {"patients", s.patients},
          {"mean_auc", optional_json(s.mean_auc)},
          {"mean_auc_ci", interval_json(s.mean_auc_ci)},
          {"ci_unit", s.ci_unit.empty() ? nlohmann::json() : nlohmann::json(s.ci_unit)},
          {"operating_points",
           {{"chosen_on", s.thresholds.chosen_on},
            {"optimistic", s.optimistic},
            {"step", s.thresholds.step ? nlohmann::json(*s.thresholds.step) : nlohmann::json()},
            {"file", s.thresholds.file.empty() ? nlohmann::json() : nlohmann::json(s.thresholds.file)}}},
          {"mean_pr_auc", optional_json(s.mean_ap)},
          {"auc", auc},
          {"auc_ci", auc_ci},
          {"pr_auc", ap},
          {"per_label", per_label},
          {"ece", s.calibration.expected_calibration_error},
          {"calibration", bins}};
}

// ---- records of metrics.jsonl ----

std::vector<const nlohmann::json*> records_of(const std::vector<nlohmann::json>& metrics, const char* type) {
  std::vector<const nlohmann::json*> out;
  for (const auto& r : metrics) {
    if (r.is_object() && r.value("type", "") == type) out.push_back(&r);
  }
  return out;
}

double number_or(const nlohmann::json& j, const char* key, double fallback) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}

// ---- HTML ----

constexpr const char* kStyle = R"(
:root { --ink: #1b1f24; --muted: #5b6570; --line: #d5dae0; --band: #f4f6f8; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--ink); margin: 0 auto; max-width: 1180px; padding: 24px 28px 64px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 34px 0 10px; border-bottom: 2px solid var(--line);
padding-bottom: 4px; } h3 { font-size: 15px; margin: 22px 0 8px; }
.subtitle, .note { color: var(--muted); } .note { font-size: 12.5px; max-width: 900px; }
.note.optimistic { color: #8a4b00; }
table { border-collapse: collapse; margin: 6px 0 10px; font-size: 13px; display: block; max-width: 100%; overflow-x: auto; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 9px; text-align: right; white-space: nowrap; }
th { background: var(--band); font-weight: 600; } td:first-child, th:first-child { text-align: left; }
tr.mean td { font-weight: 600; border-top: 2px solid var(--line); }
.grid { display: flex; flex-wrap: wrap; gap: 10px 14px; }
svg.chart { background: #fff; font-size: 11px; }
svg .chart-title { font-size: 12.5px; font-weight: 600; fill: var(--ink); }
svg .tick { fill: var(--muted); font-size: 10px; } svg .axis-label { fill: var(--ink); font-size: 11px; }
svg .grid { stroke: #eceff2; stroke-width: 1; } svg .frame { fill: none; stroke: #9aa3ad; stroke-width: 1; }
svg .reference { stroke: #9aa3ad; stroke-width: 1; stroke-dasharray: 3,3; }
svg .series { fill: none; stroke-width: 1.8; stroke-linejoin: round; }
svg .marker { fill: none; stroke-width: 2; } svg .marker-label { font-size: 10.5px; fill: var(--ink); }
svg .legend { fill: rgba(255,255,255,0.9); stroke: var(--line); } svg .legend-text { font-size: 10.5px; fill: var(--ink); }
details { margin: 8px 0; } pre { background: var(--band); padding: 10px; overflow-x: auto; font-size: 12px; }
.heatmaps { display: grid; grid-template-columns: repeat(auto-fill, minmax(250px, 1fr)); gap: 14px; }
.heatmaps figure { margin: 0; } .heatmaps img { width: 100%; height: auto; border: 1px solid var(--line); }
.heatmaps figcaption { font-size: 12px; color: var(--muted); }
)";

std::string table_html(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                       const std::string& id = "", int mean_rows = 0) {
  std::string out = "<table" + (id.empty() ? std::string() : " id=\"" + id + "\"") + "><thead><tr>";
  for (const auto& h : header) out += "<th>" + h + "</th>";
  out += "</tr></thead><tbody>\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    const bool mean = static_cast<int>(rows.size() - r) <= mean_rows;
    out += mean ? "<tr class=\"mean\">" : "<tr>";
    for (const auto& cell : rows[r]) out += "<td>" + cell + "</td>";
    out += "</tr>\n";
  }
  return out + "</tbody></table>\n";
}

std::string configuration_section(const nlohmann::json& options) {
  std::string out = "<section id=\"configuration\"><h2>Run configuration</h2>\n";
  if (options.is_null())
    return out + "<p class=\"note\">No train_options.json: a report of predictions only.</p></section>\n";
  const char* keys[] = {"model",
                        "data",
                        "epochs",
                        "max_steps",
                        "batch_size",
                        "micro_batch_size",
                        "optimizer",
                        "lr",
                        "schedule",
                        "warmup_ratio",
                        "weight_decay",
                        "precision",
                        "image_size",
                        "pipeline_stages",
                        "pipeline_schedule",
                        "seed",
                        "data_seed",
                        "val_fraction"};
  std::vector<std::vector<std::string>> rows;
  for (const char* key : keys) {
    if (!options.contains(key) || options[key].is_null()) continue;
    const nlohmann::json& v = options[key];
    rows.push_back({key, html_escape(v.is_string() ? v.get<std::string>() : v.dump())});
  }
  out += table_html({"option", "value"}, rows, "configuration-table");
  out += "<details><summary>Every option (train_options.json)</summary><pre>" + html_escape(options.dump(2)) +
         "</pre></details></section>\n";
  return out;
}

std::string data_section(const std::vector<nlohmann::json>& metrics, const std::vector<SplitSummary>& splits,
                         const std::map<std::string, PredictionsTable>& tables) {
  std::string out = "<section id=\"data\"><h2>Data</h2>\n";
  const auto data = records_of(metrics, "data");
  std::vector<std::string> names, labels;
  nlohmann::json per_split = nlohmann::json::object();
  if (!data.empty()) {
    const nlohmann::json& d = *data.back();
    out += "<p class=\"subtitle\">" + html_escape(d.value("dataset", "")) + "</p>\n";
    for (const auto& l : d.value("labels", nlohmann::json::array())) labels.push_back(l.get<std::string>());
    for (const char* split : {"train", "val", "test"}) {
      if (d.contains("splits") && d["splits"].contains(split)) {
        names.push_back(split);
        per_split[split] = d["splits"][split];
      }
    }
  } else {  // a predictions file alone: what it holds
    for (const auto& s : splits) {
      const PredictionsTable& p = tables.at(s.name);
      names.push_back(s.name);
      labels = p.labels;
      nlohmann::json positives = nlohmann::json::object(), known = nlohmann::json::object();
      for (const auto& l : s.labels) positives[l.label] = l.positives, known[l.label] = l.known;
      per_split[s.name] = {{"images", s.rows}, {"patients", s.patients}, {"positives", positives}, {"known", known}};
    }
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& n : names) {
    const auto& s = per_split[n];
    rows.push_back({n, fmt(number_or(s, "images", NAN), "%.0f"), fmt(number_or(s, "patients", NAN), "%.0f")});
  }
  out += table_html({"split", "images", "patients"}, rows, "data-splits");
  std::vector<std::string> header{"finding"};
  for (const auto& n : names) header.push_back(n + " positives (prevalence)");
  rows.clear();
  for (const auto& label : labels) {
    std::vector<std::string> row{html_escape(label)};
    for (const auto& n : names) {
      const auto& s = per_split[n];
      const double pos = s.contains("positives") ? number_or(s["positives"], label.c_str(), NAN) : NAN;
      const double known = s.contains("known") ? number_or(s["known"], label.c_str(), number_or(s, "images", NAN))
                                               : number_or(s, "images", NAN);
      row.push_back(fmt(pos, "%.0f") + " (" + (known > 0 ? percent(pos / known) : "n/a") + ")" +
                    (known < number_or(s, "images", known) ? " of " + fmt(known, "%.0f") + " known" : ""));
    }
    rows.push_back(row);
  }
  out += table_html(header, rows, "label-prevalence");
  return out + "</section>\n";
}

std::string training_section(const std::vector<nlohmann::json>& metrics) {
  const auto train = records_of(metrics, "train");
  std::string out = "<section id=\"training\"><h2>Training</h2>\n";
  if (train.empty()) return out + "<p class=\"note\">No training steps in metrics.jsonl.</p></section>\n";
  ChartSeries loss{"training loss", kChartColors[0]}, lr{"learning rate", kChartColors[1]};
  double max_loss = 0, max_lr = 0, max_step = 1;
  std::vector<double> rates;
  for (const auto* r : train) {
    const double step = number_or(*r, "step", NAN);
    max_step = std::max(max_step, step);
    if (r->contains("loss")) {
      loss.points.push_back({step, (*r)["loss"].get<double>()});
      max_loss = std::max(max_loss, (*r)["loss"].get<double>());
    }
    if (r->contains("lr")) {
      lr.points.push_back({step, (*r)["lr"].get<double>()});
      max_lr = std::max(max_lr, (*r)["lr"].get<double>());
    }
    if (r->contains("images_per_s")) rates.push_back((*r)["images_per_s"].get<double>());
  }
  ChartSpec lc{"chart-loss", "Training loss per step", "step", "loss", 0, max_step, 0, max_loss * 1.05 + 1e-9, 520};
  lc.series = {loss};
  lc.legend_top = true;
  ChartSpec rc{"chart-lr", "Learning rate per step", "step", "learning rate", 0, max_step,
               0,          max_lr * 1.05 + 1e-12,    520};
  rc.series = {lr};
  rc.legend_top = true;
  out += "<div class=\"grid\">" + svg_chart(lc) + svg_chart(rc) + "</div>\n";
  // Throughput and time per epoch.
  std::vector<std::vector<std::string>> rows;
  if (!rates.empty()) rows.push_back({"images/s (median of logged steps)", fmt(median_of(rates), "%.1f")});
  const nlohmann::json* first = nullptr;
  const nlohmann::json* last = nullptr;
  for (const auto* r : train) {
    if (r->contains("time") && r->contains("epoch")) {
      if (!first) first = r;
      last = r;
    }
  }
  if (first && last && last != first) {
    const double epochs = (*last)["epoch"].get<double>() - (*first)["epoch"].get<double>();
    const double seconds = (*last)["time"].get<double>() - (*first)["time"].get<double>();
    if (epochs > 0) rows.push_back({"time per epoch (training steps only)", fmt(seconds / epochs, "%.1f s")});
  }
  rows.push_back({"steps", fmt(max_step, "%.0f")});
  out += table_html({"throughput", ""}, rows, "throughput");
  return out + "</section>\n";
}

std::string validation_section(const std::vector<nlohmann::json>& metrics) {
  const auto evals = records_of(metrics, "eval");
  std::string out = "<section id=\"validation\"><h2>Validation during training</h2>\n";
  ChartSeries mean{"validation mean ROC-AUC", kChartColors[0]};
  mean.dots = true;
  double max_step = 1, best = -1, best_step = 0, low = 1, high = 0;
  for (const auto* r : evals) {
    if (!r->contains("mean_auc") || !(*r)["mean_auc"].is_number()) continue;
    const double step = number_or(*r, "step", 0), auc = (*r)["mean_auc"].get<double>();
    mean.points.push_back({step, auc});
    max_step = std::max(max_step, step);
    low = std::min(low, auc), high = std::max(high, auc);
    if (auc > best) best = auc, best_step = step;
  }
  if (mean.points.empty()) return out + "<p class=\"note\">No validation evaluations.</p></section>\n";
  ChartSpec c{"chart-val-auc",
              "Validation mean ROC-AUC per evaluation",
              "step",
              "mean ROC-AUC",
              0,
              max_step,
              std::max(0.0, std::floor(low * 20 - 1) / 20),
              std::min(1.0, std::ceil(high * 20 + 1) / 20),
              520};
  c.series = {mean};
  c.markers.push_back({best_step, best, kChartColors[1], "best " + fmt(best) + " at step " + fmt(best_step, "%.0f")});
  out += svg_chart(c);
  out +=
      "<p class=\"note\">The exported model/ holds the best evaluation's weights (unless the run used "
      "--export-last).</p>\n";
  return out + "</section>\n";
}

// Where a split's operating points come from, said above its table.
std::string thresholds_note(const SplitSummary& s) {
  const ThresholdSet& t = s.thresholds;
  std::string from = "chosen on the " + html_escape(t.chosen_on) + " split" +
                     (t.step ? " (model step " + std::to_string(*t.step) + ")" : std::string()) +
                     (t.file.empty() ? std::string() : " as read from " + html_escape(t.file));
  if (s.optimistic)
    return "<p class=\"note optimistic\">Operating points: thresholds " + from +
           ", i.e. tuned on the split they score: <strong>optimistic</strong> (the best this split allows, not what "
           "a threshold fixed beforehand would give).</p>\n";
  return "<p class=\"note\">Operating points: thresholds " + from + ", applied unchanged to the " +
         html_escape(s.name) + " predictions.</p>\n";
}

std::string split_table(const SplitSummary& s, bool bootstrap) {
  const std::string tag = s.optimistic ? " (optimistic)" : " (" + html_escape(s.thresholds.chosen_on) + ")";
  std::vector<std::string> header{"finding",
                                  "positives / known",
                                  "ROC-AUC",
                                  bootstrap ? "95% CI (" + s.ci_unit + "s)" : "",
                                  "PR-AUC",
                                  "ECE",
                                  "Youden thr." + tag,
                                  "sens.",
                                  "spec.",
                                  "PPV",
                                  "NPV",
                                  "90%-sens. thr." + tag,
                                  "sens.",
                                  "spec.",
                                  "PPV",
                                  "NPV"};
  if (!bootstrap) header.erase(header.begin() + 3);
  std::vector<std::vector<std::string>> rows;
  auto op_cells = [&](const std::optional<OperatingPoint>& op, std::vector<std::string>& row) {
    if (!op) {
      row.insert(row.end(), {"n/a", "", "", "", ""});
      return;
    }
    row.push_back(fmt(op->threshold, "%.3f"));
    row.push_back(fmt(op->sensitivity()));
    row.push_back(fmt(op->specificity()));
    row.push_back(fmt(op->ppv()));
    row.push_back(fmt(op->npv()));
  };
  for (const LabelSummary& l : s.labels) {
    std::vector<std::string> row{html_escape(l.label), std::to_string(l.positives) + " / " + std::to_string(l.known),
                                 fmt(l.auc)};
    if (bootstrap) row.push_back(interval(l.auc_ci));
    row.push_back(fmt(l.ap));
    row.push_back(fmt(l.ece));
    op_cells(l.youden, row);
    op_cells(l.sensitive, row);
    rows.push_back(row);
  }
  std::vector<std::string> mean{"mean", "", fmt(s.mean_auc)};
  if (bootstrap) mean.push_back(interval(s.mean_auc_ci));
  mean.push_back(fmt(s.mean_ap));
  mean.push_back(fmt(s.calibration.expected_calibration_error));
  mean.resize(header.size());
  rows.push_back(mean);
  return table_html(header, rows, "metrics-" + s.name, 1);
}

std::string evaluation_section(const std::vector<SplitSummary>& splits, const ReportOptions& options) {
  std::string out = "<section id=\"evaluation\"><h2>Evaluation of the exported model</h2>\n";
  if (splits.empty()) return out + "<p class=\"note\">No saved predictions.</p></section>\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : splits) {
    rows.push_back({s.name, std::to_string(s.rows), std::to_string(s.patients), fmt(s.mean_auc),
                    options.bootstrap > 0 ? interval(s.mean_auc_ci) : "", fmt(s.mean_ap),
                    fmt(s.calibration.expected_calibration_error)});
  }
  out += table_html({"split", "images", "patients", "mean ROC-AUC", "95% CI", "mean PR-AUC", "ECE (all findings)"},
                    rows, "evaluation-summary");
  std::string units;
  for (const auto& s : splits) units += (units.empty() ? "" : ", ") + s.name + ": " + s.ci_unit + "s";
  out +=
      "<p class=\"note\">ROC-AUC and PR-AUC as scikit-learn's roc_auc_score and average_precision_score, over the "
      "images where a finding is known; 95% intervals: " +
      (options.bootstrap > 0
           ? std::to_string(options.bootstrap) + " bootstrap resamples (seed " + std::to_string(options.seed) +
                 ") of the patients, each drawn patient bringing all its images, where the predictions name "
                 "patients (images of one patient are not independent), else of the images (" +
                 html_escape(units) + "); a resample in which a finding has one class only is skipped for it"
           : std::string("none (--bootstrap 0)")) +
      ". Operating points: the Youden threshold (maximum sensitivity + specificity - 1) and the highest threshold "
      "reaching 90% sensitivity, as predicted probabilities, chosen on the validation split and applied unchanged "
      "to the others; a threshold tuned on the split it scores is labelled optimistic. ECE: expected calibration "
      "error over 10 equal-width probability bins.</p>\n";
  for (const auto& s : splits) {
    out += "<h3 id=\"table-" + s.name + "\">" + s.name + " split</h3>\n" + thresholds_note(s) +
           split_table(s, options.bootstrap > 0);
  }
  // ROC and PR small multiples: one chart per finding, a curve per split.
  std::vector<std::string> labels;
  for (const auto& l : splits.front().labels) labels.push_back(l.label);
  for (const bool roc : {true, false}) {
    out += std::string("<h3>") + (roc ? "ROC curves" : "Precision-recall curves") + "</h3>\n<div class=\"grid\" id=\"" +
           (roc ? "roc-curves" : "pr-curves") + "\">\n";
    for (size_t l = 0; l < labels.size(); ++l) {
      ChartSpec c{std::string(roc ? "roc-" : "pr-") + std::to_string(l), labels[l],
                  roc ? "1 - specificity" : "recall (sensitivity)", roc ? "sensitivity" : "precision (PPV)"};
      c.width = 272, c.height = 236, c.diagonal = roc;
      c.empty_note = "undefined: one class only";
      for (size_t si = 0; si < splits.size(); ++si) {
        const LabelSummary& ls = splits[si].labels[l];
        ChartSeries series;
        series.color = kChartColors[si % 8];
        const auto& points = roc ? ls.roc : ls.pr;
        for (const auto& p : points) series.points.push_back({p.x, p.y});
        const auto& value = roc ? ls.auc : ls.ap;
        const auto& ci = roc ? ls.auc_ci : ls.ap_ci;
        series.name = splits[si].name + (roc ? " AUC " : " AP ") + fmt(value) +
                      (ci ? " (" + fmt(ci->low, "%.2f") + "-" + fmt(ci->high, "%.2f") + ")" : "");
        if (points.empty()) series.name = splits[si].name + (ls.positives == 0 ? ": no positive" : ": no negative");
        if (!roc && !points.empty()) {
          series.name += ", prev. " + fmt(static_cast<double>(ls.positives) / static_cast<double>(ls.known), "%.2f");
        }
        c.legend_left = !roc;  // PR curves run high on the left and end low on the right
        c.series.push_back(std::move(series));
      }
      out += svg_chart(c);
    }
    out += "</div>\n";
  }
  // Calibration: one reliability diagram per split, every known (image, finding) pair.
  out += "<h3>Calibration</h3>\n<div class=\"grid\" id=\"calibration\">\n";
  for (size_t si = 0; si < splits.size(); ++si) {
    const SplitSummary& s = splits[si];
    ChartSpec c{"calibration-" + s.name, s.name + ": reliability (all findings)", "mean predicted probability",
                "fraction positive"};
    c.width = 340, c.height = 280, c.diagonal = true;  // legend bottom-right: reliability curves rarely go there
    ChartSeries series{s.name + " ECE " + fmt(s.calibration.expected_calibration_error), kChartColors[si % 8]};
    series.dots = true;
    for (const auto& b : s.calibration.bins) {
      if (b.count > 0) series.points.push_back({b.mean_probability, b.fraction_positive});
    }
    c.series.push_back(std::move(series));
    out += svg_chart(c);
  }
  out += "</div>\n";
  return out + "</section>\n";
}

std::string parallel_section(const std::vector<nlohmann::json>& metrics) {
  const auto records = records_of(metrics, "parallel");
  if (records.empty()) return "";
  const nlohmann::json& p = *records.back();
  std::vector<std::vector<std::string>> rows;
  for (const auto& [key, value] : p.items()) {
    if (key == "type" || key == "step") continue;
    rows.push_back({html_escape(key), html_escape(value.is_number_float() ? fmt(value.get<double>(), "%.4g")
                                                  : value.is_string()     ? value.get<std::string>()
                                                                          : value.dump())});
  }
  return "<section id=\"parallelism\"><h2>Pipeline and data parallelism</h2>\n" +
         table_html({"figure", "value"}, rows, "parallel-figures") + "</section>\n";
}

std::string heatmap_section(const std::vector<ReportHeatmap>& heatmaps) {
  if (heatmaps.empty()) return "";
  std::string out =
      "<section id=\"heatmaps\"><h2>Where the model looks</h2>\n<p class=\"note\">Test images with "
      "their highest-scoring findings (vitpipe explain). Maps show where the evidence for the finding "
      "lies according to the method named; they explain the model, not the disease.</p>\n"
      "<div class=\"heatmaps\">\n";
  for (const auto& h : heatmaps) {
    std::ifstream file(h.overlay_png, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    VP_REQUIRE(!bytes.empty(), h.overlay_png.string(), ": missing or empty heatmap overlay");
    out += "<figure><img alt=\"" + html_escape(h.finding + " on " + h.image) + "\" src=\"data:image/png;base64," +
           base64(bytes) + "\" title=\"" + html_escape(h.image) + "\"><figcaption>" +
           html_escape(fs::path(h.image).filename().string()) + ": " + html_escape(h.finding) +
           " p = " + fmt(h.probability) + " (" + html_escape(h.method) + ")</figcaption></figure>\n";
  }
  return out + "</div></section>\n";
}

}  // namespace

SubgroupAnalysis predictions_subgroups(const PredictionsTable& p, const ReportOptions& options,
                                       const std::optional<ThresholdSet>& thresholds) {
  std::vector<SubgroupAttribute> attributes;
  if (!p.sexes.empty()) attributes.push_back(sex_attribute(p.sexes));
  if (!p.ages.empty()) attributes.push_back(age_attribute(p.ages));
  if (!p.views.empty()) attributes.push_back(view_attribute(p.views));
  for (const auto& [column, values] : p.subgroup_columns) attributes.push_back(column_attribute(column, values));
  std::optional<BootstrapOptions> bootstrap;
  if (options.bootstrap > 0) {
    bootstrap = BootstrapOptions{options.bootstrap, 0.95, options.seed};
    set_bootstrap_unit(*bootstrap, options.bootstrap_unit, p.patients, p.source);
  }
  const std::vector<float> scores(p.scores.begin(), p.scores.end());
  const SubgroupData data{p.labels,        scores,
                          p.targets,       p.has_unknown ? std::span<const float>(p.weights) : std::span<const float>(),
                          p.probabilities, true};
  return analyze_subgroups(attributes, data, p.patients, bootstrap, thresholds);
}

namespace {

std::vector<nlohmann::json> read_metrics_file(const fs::path& path) {
  std::ifstream in(path);
  VP_REQUIRE(in, path.string(), ": cannot open");
  std::vector<nlohmann::json> out;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception&) {
      // A run killed mid-write leaves at most a torn last line: keep what precedes it.
      if (in.peek() == EOF) break;
      fail(path.string(), " line ", number, ": not a JSON object");
    }
  }
  return out;
}

}  // namespace

ReportInputs read_run_directory(const fs::path& run_dir) {
  VP_REQUIRE(fs::is_directory(run_dir), run_dir.string(), ": not a directory");
  const fs::path metrics = run_dir / "metrics.jsonl";
  VP_REQUIRE(
      fs::exists(metrics), run_dir.string(),
      ": not a training run (no metrics.jsonl); for an evaluation alone use vitpipe report --predictions FILE.csv");
  ReportInputs in;
  in.title = run_dir.string();
  in.metrics = read_metrics_file(metrics);
  VP_REQUIRE(!in.metrics.empty(), metrics.string(), ": no records");
  if (const fs::path options = run_dir / "train_options.json"; fs::exists(options)) {
    const std::string text = read_text_file(options);
    try {
      in.train_options = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail(options.string(), ": not valid JSON", json_error_detail(e, text));
    }
  }
  for (const char* split : {"val", "test"}) {
    const fs::path p = run_dir / (std::string("predictions-") + split + ".csv");
    if (fs::exists(p)) in.splits[split] = read_predictions_csv(p);
  }
  if (fs::exists(run_dir / "thresholds.json")) in.thresholds = read_thresholds_file(run_dir / "thresholds.json");
  for (const char* name : {"localization-test.json", "localization-val.json"}) {
    if (!in.localization && fs::exists(run_dir / name)) in.localization = read_localization_file(run_dir / name);
  }
  const fs::path index = run_dir / "heatmaps" / "index.json";
  if (fs::exists(index)) {
    nlohmann::json j;
    const std::string text = read_text_file(index);
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail(index.string(), ": not valid JSON", json_error_detail(e, text));
    }
    for (const auto& e : j.value("maps", nlohmann::json::array())) {
      ReportHeatmap h;
      h.overlay_png = index.parent_path() / e.value("overlay", "");
      h.image = e.value("image", "");
      h.finding = e.value("finding", "");
      h.method = e.value("method", "");
      h.probability = e.value("probability", 0.0);
      in.heatmaps.push_back(h);
    }
  }
  return in;
}

std::optional<ThresholdSet> report_thresholds(const ReportInputs& in) {
  if (in.thresholds) return in.thresholds;
  if (!in.splits.count("val")) return std::nullopt;
  const PredictionsTable& val = in.splits.at("val");
  return choose_thresholds(val.labels, val.probabilities, val.targets, val.weights, "val");
}

std::string training_report_html(const ReportInputs& in, const ReportOptions& options, nlohmann::json* summary) {
  const std::optional<ThresholdSet> thresholds = report_thresholds(in);
  std::vector<SplitSummary> splits;
  for (const char* preferred : {"val", "test"}) {
    if (in.splits.count(preferred))
      splits.push_back(summarize(preferred, in.splits.at(preferred), options, thresholds));
  }
  for (const auto& [name, table] : in.splits) {
    if (name != "val" && name != "test") splits.push_back(summarize(name, table, options, thresholds));
  }
  for (const auto& s : splits) {
    VP_REQUIRE(s.labels.size() == splits.front().labels.size(), in.splits.at(s.name).source,
               ": its findings differ from ", in.splits.at(splits.front().name).source, "'s");
  }
  nlohmann::json data = {
      {"title", in.title}, {"splits", nlohmann::json::object()}, {"sections", nlohmann::json::array()}};
  for (const auto& s : splits) data["splits"][s.name] = split_json(s);

  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::string body = "<header><h1>vitpipe report</h1><p class=\"subtitle\">" + html_escape(in.title) +
                     " &middot; written " + date + "</p></header>\n";
  std::vector<std::string> sections;
  auto add = [&](const std::string& id, std::string html) {
    if (html.empty()) return;
    sections.push_back(id);
    body += html;
  };
  add("configuration", configuration_section(in.train_options));
  add("data", data_section(in.metrics, splits, in.splits));
  if (!in.metrics.empty()) {
    add("training", training_section(in.metrics));
    add("validation", validation_section(in.metrics));
  }
  add("evaluation", evaluation_section(splits, options));
  // Subgroups of the test split (else of the last split shown), at the thresholds its operating points use.
  if (!splits.empty()) {
    const SplitSummary& shown = *std::find_if(
        splits.begin(), splits.end(), [&](const SplitSummary& s) { return s.name == "test" || &s == &splits.back(); });
    const SubgroupAnalysis subgroups = predictions_subgroups(in.splits.at(shown.name), options, shown.thresholds);
    if (!subgroups.groups.empty()) {
      data["subgroups"] = {{"split", shown.name},
                           {"groups", subgroups_json(subgroups)},
                           {"gaps", subgroup_gaps_json(subgroups)},
                           {"left_out", subgroup_left_out_json(subgroups)}};
    }
    add("subgroups", subgroup_section(shown.name, subgroups));
  }
  add("localization", localization_section(in.localization));
  if (in.localization) data["localization"] = localization_summary_json(*in.localization);
  add("parallelism", parallel_section(in.metrics));
  add("heatmaps", heatmap_section(in.heatmaps));
  data["sections"] = sections;
  if (summary) *summary = data;
  // "</" cannot end the script early: JSON escapes it as "<\/".
  std::string json = data.dump();
  for (size_t at = json.find("</"); at != std::string::npos; at = json.find("</", at + 3)) json.replace(at, 2, "<\\/");
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" "
         "content=\"width=device-width, initial-scale=1\"><title>vitpipe report: " +
         html_escape(in.title) + "</title>\n<style>" + kStyle + "</style></head>\n<body>\n" + body +
         "<script type=\"application/json\" id=\"report-data\">" + json + "</script>\n</body></html>\n";
}

}  // namespace vitpipe
