// The training report: one self-contained HTML file (styles, charts and data inlined, nothing fetched) built only
// from what a run writes: metrics.jsonl, train_options.json, the predictions CSVs of the exported model and the
// heatmaps `vitpipe explain` left. A view over files, so it can be rebuilt for any past run, or for a predictions
// file alone (`vitpipe report --predictions FILE.csv`).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "evaluation/bootstrap_unit.h"
#include "evaluation/operating_thresholds.h"
#include "evaluation/subgroups.h"
#include "report/localization_section.h"
#include "report/predictions_table.h"

namespace vitpipe {

// One explained image: its overlay PNG (embedded as a data URL) and what it shows.
struct ReportHeatmap {
  std::filesystem::path overlay_png;
  std::string image, finding, method;
  double probability = 0;
};

struct ReportInputs {
  std::string title;                               // the run directory, or the predictions file
  std::vector<nlohmann::json> metrics;             // metrics.jsonl records, in order (empty: no run)
  nlohmann::json train_options;                    // train_options.json (null: no run)
  std::map<std::string, PredictionsTable> splits;  // "val", "test" (or the file's name) -> predictions
  std::vector<ReportHeatmap> heatmaps;
  // Operating-point thresholds chosen elsewhere (RUN_DIR/thresholds.json, or `report --thresholds FILE`). Without
  // them the val split's are chosen here; a split with neither is scored at its own thresholds, labelled optimistic.
  std::optional<ThresholdSet> thresholds;
  // Heatmaps scored on radiologists' boxes (RUN_DIR/localization-test.json, else -val.json, or `report
  // --localization FILE`); none: the report says localization was not evaluated.
  std::optional<LocalizationFile> localization;
};

struct ReportOptions {
  int64_t bootstrap = 200;  // resamples for the 95% intervals (0: none)
  uint64_t seed = 0;
  BootstrapUnit bootstrap_unit = BootstrapUnit::automatic;  // patients where the predictions name them
};

// Reads RUN_DIR/metrics.jsonl (required), train_options.json, predictions-val.csv, predictions-test.csv,
// thresholds.json, localization-test.json (else localization-val.json) and heatmaps/index.json (each optional); one
// clear error for a directory that is not a run.
ReportInputs read_run_directory(const std::filesystem::path& run_dir);

// The HTML text. Also returns, through `summary` (optional), the numbers it shows as JSON (the same object is
// embedded in the page as <script type="application/json" id="report-data">).
std::string training_report_html(const ReportInputs& inputs, const ReportOptions& options,
                                 nlohmann::json* summary = nullptr);

// The subgroups of one split's predictions (sex, age band, view and subgroup:<column> where the file has them), on the
// same patient resamples as the report's intervals (options) and at `thresholds`: what the report's subgroup section
// shows.
SubgroupAnalysis predictions_subgroups(const PredictionsTable& p, const ReportOptions& options,
                                       const std::optional<ThresholdSet>& thresholds);

// The thresholds the report applies to every split: `inputs.thresholds`, else those chosen on its val split, else
// none (each split then chooses its own).
std::optional<ThresholdSet> report_thresholds(const ReportInputs& inputs);

}  // namespace vitpipe
