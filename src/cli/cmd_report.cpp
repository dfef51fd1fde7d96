// `vitpipe report RUN_DIR [--out FILE.html]` and `vitpipe report --predictions FILE.csv ... --out FILE.html`: the
// self-contained HTML report of a training run (train writes it at its end) or of saved predictions alone.
// Intervals resample patients where the predictions name them (--bootstrap-unit); operating points use the
// thresholds of --thresholds FILE, else RUN_DIR/thresholds.json, else those chosen on a val split.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "report/training_report.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe::cli {
namespace {

struct ReportCommandOptions {
  std::string run_dir;
  std::vector<std::string> predictions;
  std::string out;
  int64_t bootstrap = 200;
  uint64_t seed = 0;
  std::string bootstrap_unit = "auto";
  std::string thresholds;
  std::string localization;
};

void run_report(const ReportCommandOptions& o) {
  namespace fs = std::filesystem;
  VP_REQUIRE(!o.run_dir.empty() || !o.predictions.empty(),
             "report: give a run directory (RUN_DIR) or --predictions FILE.csv");
  VP_REQUIRE(o.bootstrap >= 0 && o.bootstrap <= 100000, "--bootstrap: expected 0..100000, got ", o.bootstrap);
  ReportInputs inputs;
  if (!o.run_dir.empty()) inputs = read_run_directory(o.run_dir);
  for (const auto& file : o.predictions) {
    std::string name = fs::path(file).stem().string();
    if (name.rfind("predictions-", 0) == 0) name = name.substr(12);
    VP_REQUIRE(!inputs.splits.count(name) || !o.run_dir.empty(), "--predictions ", file, ": a second file named ",
               name);
    inputs.splits[name] = read_predictions_csv(file);
    if (o.run_dir.empty()) inputs.title = inputs.title.empty() ? file : inputs.title + ", " + file;
  }
  fs::path out = o.out;
  if (out.empty()) {
    out = !o.run_dir.empty() ? fs::path(o.run_dir) / "report.html"
                             : fs::path(o.predictions.front()).replace_extension(".html");
  }
  VP_REQUIRE(fs::is_directory(fs::absolute(out).parent_path()), "--out ", out.string(), ": directory ",
             fs::absolute(out).parent_path().string(), " does not exist");
  if (!o.thresholds.empty()) inputs.thresholds = read_thresholds_file(o.thresholds);
  if (!o.localization.empty()) inputs.localization = read_localization_file(o.localization);
  ReportOptions options;
  options.bootstrap = o.bootstrap;
  options.seed = o.seed;
  options.bootstrap_unit = parse_bootstrap_unit(o.bootstrap_unit, "--bootstrap-unit");
  write_text_file_atomically(out, training_report_html(inputs, options));
  std::printf("%s\n", out.string().c_str());
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto o = std::make_shared<ReportCommandOptions>();
  auto* cmd = app.add_subcommand("report", "Write a self-contained HTML report of a training run or of predictions");
  cmd->add_option("run_dir", o->run_dir, "A training run's output directory");
  cmd->add_option("--predictions", o->predictions, "Predictions CSV (vitpipe eval --save-predictions); repeatable");
  cmd->add_option("--out", o->out, "The HTML file (default: RUN_DIR/report.html, or FILE.html beside the CSV)");
  cmd->add_option("--bootstrap", o->bootstrap, "Bootstrap resamples for the 95% intervals (0 = none)")
      ->capture_default_str();
  cmd->add_option("--bootstrap-seed", o->seed, "Seed of the bootstrap resampling")->capture_default_str();
  cmd->add_option("--bootstrap-unit", o->bootstrap_unit,
                  "What the bootstrap resamples: patient, image, or auto (patients where the predictions name them)")
      ->capture_default_str();
  cmd->add_option("--thresholds", o->thresholds,
                  "Operating-point thresholds (a run's thresholds.json, chosen on val) applied to every split");
  cmd->add_option("--localization", o->localization,
                  "Heatmaps scored on boxes (vitpipe eval --boxes --save-localization FILE.json); default: "
                  "RUN_DIR/localization-test.json where it exists");
  cmd->callback([o] { run_report(*o); });
}

}  // namespace vitpipe::cli
