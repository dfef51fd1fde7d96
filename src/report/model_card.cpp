#include "report/model_card.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include "evaluation/bootstrap_unit.h"
#include "evaluation/calibration.h"
#include "evaluation/curves.h"
#include "evaluation/operating_point.h"
#include "evaluation/operating_thresholds.h"
#include "evaluation/ranking_metrics.h"
#include "io/hf_config.h"
#include "io/hub_settings.h"
#include "io/hub_snapshot.h"
#include "io/safetensors.h"
#include "report/card_subgroups.h"
#include "report/predictions_table.h"
#include "report/training_report.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_error_detail.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kMarker = "<!-- vitpipe model card:";
constexpr const char* kNotEvaluated = "not evaluated";

// ---- small formatting helpers ----

std::string fixed(double v, int digits = 3) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, v);
  return buffer;
}

// A float YAML 1.1 (PyYAML) and YAML 1.2 (the Hub's js-yaml) both read back as the same double: the shortest
// round-trip form, with a '.' in the mantissa (PyYAML reads "1e-05" as a string).
std::string yaml_number(double v) {
  std::string text = json(v).dump();
  const size_t e = text.find_first_of("eE");
  if (text.find('.') == std::string::npos) text.insert(e == std::string::npos ? text.size() : e, ".0");
  return text;
}

// Bytes that are not UTF-8 (a path, a flag) become U+FFFD instead of failing the card.
std::string safe_dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// JSON strings are YAML double-quoted scalars.
std::string yaml_string(const std::string& s) { return safe_dump(json(s)); }

std::string markdown_cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out;
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

json read_json_file(const fs::path& path) {
  const std::string text = read_text_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(path.string(), ": not valid JSON", json_error_detail(e, text));
  }
}

std::vector<json> read_metrics_records(const fs::path& path) {
  std::ifstream in(path);
  VP_REQUIRE(in, path.string(), ": cannot open");
  std::vector<json> out;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back(json::parse(line));
    } catch (const json::exception&) {
      if (in.peek() == EOF) break;  // a run killed mid-write leaves at most a torn last line
      fail(path.string(), " line ", number, ": not a JSON object");
    }
    VP_REQUIRE(out.back().is_object(), path.string(), " line ", number, ": expected a JSON object");
  }
  return out;
}

// ---- what the card is made of ----

struct DatasetInfo {
  std::string kind;  // chestxray14, chexpert, csv, ... ("" = not known)
  std::string name;  // a readable name
  std::string location;
};

DatasetInfo dataset_info(const std::string& spec) {
  DatasetInfo d;
  const size_t colon = spec.find(':');
  d.kind = colon == std::string::npos ? spec : spec.substr(0, colon);
  // Only the last path component: a card that goes to the Hub should not carry local paths.
  if (colon != std::string::npos) d.location = fs::path(spec.substr(colon + 1)).filename().string();
  static const std::map<std::string, std::string> names = {
      {"chestxray14", "NIH ChestX-ray14"},
      {"chexpert", "CheXpert"},
      {"mimic-cxr", "MIMIC-CXR-JPG"},
      {"padchest", "PadChest"},
      {"vindr-cxr", "VinDr-CXR"},
      {"csv", "a CSV-listed image set"},
      {"folder", "an image folder dataset"},
      {"cache", "a packed cache"},
  };
  const auto it = names.find(d.kind);
  d.name = it != names.end() ? it->second : d.kind;
  return d;
}

// One evaluated split: computed from its predictions file with the evaluation layer (eval's code and float
// scores, so the point values are `vitpipe eval`'s).
struct SplitResult {
  std::string split;
  int64_t rows = 0, patients = 0;
  std::vector<std::string> labels;
  EvaluationMetrics metrics;
  std::string ci_unit;
  Calibration calibration;
  std::vector<LabelOperatingPoints> points;  // at thresholds.json's thresholds (empty without them)
};

SplitResult evaluate_predictions(const std::string& split, const PredictionsTable& p, int64_t bootstrap,
                                 const std::optional<ThresholdSet>& thresholds) {
  SplitResult r;
  r.split = split;
  r.rows = static_cast<int64_t>(p.rows());
  std::set<std::string> patients;
  for (const auto& id : p.patients)
    if (!id.empty()) patients.insert(id);
  r.patients = static_cast<int64_t>(patients.size());
  r.labels = p.labels;
  const std::vector<float> scores(p.scores.begin(), p.scores.end());
  std::optional<BootstrapOptions> options;
  if (bootstrap > 0 && r.rows > 0) {
    options = BootstrapOptions{bootstrap, 0.95, 0};
    set_bootstrap_unit(*options, BootstrapUnit::automatic, p.patients, p.source);
    r.ci_unit = options->unit;
  }
  r.metrics = evaluate_multilabel(scores, p.targets, static_cast<int64_t>(p.labels.size()), options,
                                  p.has_unknown ? std::span<const float>(p.weights) : std::span<const float>());
  r.calibration = calibration(p.probabilities, p.targets, p.weights);
  if (thresholds) r.points = apply_thresholds(*thresholds, p.labels, p.probabilities, p.targets, p.weights);
  return r;
}

struct CardInputs {
  fs::path model_dir;
  ModelCardOptions options;
  std::optional<ViTConfig> config;
  json preprocessor;  // null when absent
  std::optional<int64_t> parameters;
  json train_options;  // null: no run
  json data;           // the run's "data" record (counts per split), null when absent
  std::optional<ThresholdSet> thresholds;
  std::vector<SplitResult> results;  // val then test; empty: not evaluated
  std::string results_withheld;      // why a run's results do not describe these weights ("" = they do)
  // By subgroup on the test split (else val): nullopt with the reason when not evaluated.
  std::string subgroup_split;
  std::optional<SubgroupAnalysis> subgroups;
  std::string base_model;
  std::string license_source;  // "" = given (--license), else where it was read
};

std::optional<int64_t> count_parameters(const fs::path& file) {
  if (!fs::exists(file)) return std::nullopt;
  const SafetensorsFile st = read_safetensors(file);
  int64_t n = 0;
  for (const auto& [name, tensor] : st.tensors) n += tensor.numel();
  return n;
}

// A Hub repo id ("org/name"): what `base_model` may name. A local path is not one (a bare "name" is more likely a
// directory than one of the Hub's few unprefixed models, so it is not declared).
bool looks_like_repo_id(const std::string& s) {
  return std::count(s.begin(), s.end(), '/') == 1 && is_valid_repo_id(s) && !fs::exists(s);
}

// The license the base model's own card declares, when the local Hugging Face cache holds that card (no network).
std::string base_model_license(const std::string& repo_id) {
  std::string why;
  std::optional<fs::path> snapshot;
  try {
    snapshot = find_cached_model(repo_id, "main", HubSettings::from_environment(), &why);
  } catch (const Error&) {
    return "";  // no cache to read: nothing declared
  }
  if (!snapshot || !fs::exists(*snapshot / "README.md")) return "";
  const std::string text = read_text_file(*snapshot / "README.md");
  if (text.rfind("---", 0) != 0) return "";
  const size_t end = text.find("\n---", 3);
  if (end == std::string::npos) return "";
  try {
    const YAML::Node meta = YAML::Load(text.substr(3, end - 3));
    if (meta.IsMap() && meta["license"] && meta["license"].IsScalar()) return meta["license"].as<std::string>();
  } catch (const YAML::Exception&) {
  }
  return "";  // a card we cannot read declares nothing we can repeat
}

CardInputs read_inputs(const fs::path& model_dir, const ModelCardOptions& options) {
  VP_REQUIRE(fs::is_directory(model_dir), "card: ", model_dir.string(), " is not a directory");
  CardInputs in;
  in.model_dir = model_dir;
  in.options = options;
  if (fs::exists(model_dir / "config.json")) in.config = read_hf_config(model_dir / "config.json").config;
  if (fs::exists(model_dir / "preprocessor_config.json"))
    in.preprocessor = read_json_file(model_dir / "preprocessor_config.json");
  in.parameters = count_parameters(model_dir / (options.adapter ? "adapter_model.safetensors" : "model.safetensors"));
  // Only a Hub repo id is a base_model (an export passes its checkpoint's base, which may be a local directory).
  if (looks_like_repo_id(options.base_model)) in.base_model = options.base_model;
  // peft names the adapter's base in adapter_config.json; only a Hub repo id is worth declaring.
  if (in.base_model.empty() && options.adapter && fs::exists(model_dir / "adapter_config.json")) {
    const json adapter = read_json_file(model_dir / "adapter_config.json");
    const json base = adapter.is_object() ? adapter.value("base_model_name_or_path", json()) : json();
    if (base.is_string() && looks_like_repo_id(base.get<std::string>())) in.base_model = base.get<std::string>();
  }
  if (options.run_dir.empty()) return in;

  const fs::path run = options.run_dir;
  VP_REQUIRE(fs::exists(run / "metrics.jsonl"), "card: ", run.string(),
             " is not a training run (no metrics.jsonl); pass --run RUN_DIR");
  if (fs::exists(run / "train_options.json")) {
    in.train_options = read_json_file(run / "train_options.json");
    VP_REQUIRE(in.train_options.is_object(), (run / "train_options.json").string(), ": expected a JSON object");
  }
  // The license the run declared (train --license) carries over to its exports unless another is given.
  if (in.options.license.empty() && in.train_options.is_object() &&
      in.train_options.value("license", json()).is_string())
    in.options.license = in.train_options["license"].get<std::string>();
  if (in.base_model.empty() && in.train_options.is_object()) {
    const std::string model = in.train_options.value("model", "");
    if (looks_like_repo_id(model) && !fs::exists(run / model)) in.base_model = model;
  }
  if (in.options.license.empty() && !in.base_model.empty()) {
    in.options.license = base_model_license(in.base_model);
    in.license_source = in.options.license.empty() ? "" : "the base model's card";
  }
  for (const json& record : read_metrics_records(run / "metrics.jsonl")) {
    if (record.value("type", "") == "data") in.data = record;
  }
  if (fs::exists(run / "thresholds.json")) in.thresholds = read_thresholds_file(run / "thresholds.json");
  // An export of one checkpoint is described by the run's results only when it holds the weights the run evaluated
  // (the step thresholds.json names); otherwise the numbers belong to other weights.
  if (options.step) {
    if (!in.thresholds || !in.thresholds->step) {
      in.results_withheld = "the run did not record which step its evaluated model came from";
    } else if (*options.step < 0) {
      in.results_withheld = "the training step of these weights is not known";
    } else if (*in.thresholds->step != *options.step) {
      in.results_withheld = "these weights are step " + std::to_string(*options.step) + "; the run evaluated step " +
                            std::to_string(*in.thresholds->step);
    }
  }
  if (in.results_withheld.empty()) {
    for (const char* split : {"val", "test"}) {
      const fs::path file = run / (std::string("predictions-") + split + ".csv");
      if (!fs::exists(file)) continue;
      const PredictionsTable table = read_predictions_csv(file);
      in.results.push_back(evaluate_predictions(split, table, options.bootstrap, in.thresholds));
      // The test split's subgroups where it was evaluated (val's thresholds applied unchanged), else val's.
      in.subgroup_split = split;
      in.subgroups =
          predictions_subgroups(table, ReportOptions{options.bootstrap, 0, BootstrapUnit::automatic}, in.thresholds);
    }
  }
  return in;
}

std::string family_name(const std::string& model_type) {
  static const std::map<std::string, std::string> names = {
      {"vit", "ViT"}, {"deit", "DeiT"}, {"dinov2", "DINOv2"}, {"dinov2_with_registers", "DINOv2 with registers"}};
  const auto it = names.find(model_type);
  return it != names.end() ? it->second : model_type;
}

std::string image_size_text(const CardInputs& in) {
  if (in.preprocessor.is_object() && in.preprocessor.contains("size")) {
    const json& size = in.preprocessor["size"];
    if (size.is_number_integer()) return std::to_string(size.get<int64_t>()) + " x " + size.dump();
    if (size.is_object() && size.contains("height") && size.contains("width"))
      return size["height"].dump() + " x " + size["width"].dump();
    if (size.is_object() && size.contains("shortest_edge")) return "shortest edge " + size["shortest_edge"].dump();
  }
  if (in.config) return std::to_string(in.config->input_size()) + " x " + std::to_string(in.config->input_size());
  return "not known";
}

std::string model_name(const CardInputs& in) {
  const fs::path dir = fs::absolute(in.model_dir).lexically_normal();
  std::string name = dir.filename().string();
  if (name.empty()) name = dir.parent_path().filename().string();
  // A run's model/ is better named by its run.
  if ((name == "model" || name == "adapter") && !in.options.run_dir.empty())
    name = fs::absolute(in.options.run_dir).lexically_normal().filename().string() +
           (name == "adapter" ? "-lora-adapter" : "");
  return name.empty() ? "vitpipe-model" : name;
}

// ---- the YAML front matter ----

std::string front_matter(const CardInputs& in, const DatasetInfo& dataset) {
  std::string y = "---\n";
  y += std::string("library_name: ") + (in.options.adapter ? "peft" : "transformers") + "\n";
  y += "pipeline_tag: image-classification\n";
  if (!in.options.license.empty()) y += "license: " + yaml_string(in.options.license) + "\n";
  y += "tags:\n- vision\n- medical-imaging\n- chest-x-ray\n- vitpipe\n";
  if (in.config) y += "- " + yaml_string(in.config->model_type) + "\n";
  if (!in.base_model.empty()) y += "base_model: " + yaml_string(in.base_model) + "\n";
  if (!dataset.kind.empty()) y += "datasets:\n- " + yaml_string(dataset.kind) + "\n";
  if (!in.results.empty()) {
    y += "metrics:\n- roc_auc\n";
    y += "model-index:\n- name: " + yaml_string(model_name(in)) + "\n  results:\n";
    for (const SplitResult& r : in.results) {
      y += "  - task:\n      type: image-classification\n      name: Multi-label image classification\n";
      y += "    dataset:\n      name: " + yaml_string(dataset.name) + "\n      type: " + yaml_string(dataset.kind) +
           "\n      split: " + yaml_string(r.split) + "\n";
      y += "    metrics:\n";
      // A finding whose AUC is undefined on the split (one class only) has no entry: no number is invented.
      for (size_t l = 0; l < r.labels.size(); ++l) {
        const auto& auc = r.metrics.roc_auc.per_label[l];
        if (!auc) continue;
        y += "    - type: roc_auc\n      value: " + yaml_number(*auc) +
             "\n      name: " + yaml_string("ROC-AUC " + r.labels[l]) + "\n      config: " + yaml_string(r.labels[l]) +
             "\n";
      }
      if (r.metrics.roc_auc.mean) {
        y += "    - type: roc_auc\n      value: " + yaml_number(*r.metrics.roc_auc.mean) + "\n      name: " +
             yaml_string("mean ROC-AUC (" + std::to_string(r.metrics.roc_auc.defined_labels) + " findings)") +
             "\n      config: mean\n";
      }
    }
  }
  return y + "---\n";
}

// ---- the Markdown body ----

std::string option_text(const json& options, const std::string& key) {
  if (!options.is_object() || !options.contains(key) || options[key].is_null()) return "";
  const json& v = options[key];
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string hyperparameters(const json& o) {
  static const std::vector<std::pair<std::string, std::string>> keys = {
      {"epochs", "epochs"},
      {"max_steps", "max steps"},
      {"batch_size", "batch size (images per optimizer step)"},
      {"micro_batch_size", "micro-batch size"},
      {"optimizer", "optimizer"},
      {"lr", "learning rate"},
      {"weight_decay", "weight decay"},
      {"layer_decay", "layer-wise lr decay"},
      {"schedule", "schedule"},
      {"warmup_ratio", "warm-up ratio"},
      {"warmup_steps", "warm-up steps"},
      {"clip_grad_norm", "gradient clipping (global norm)"},
      {"precision", "precision"},
      {"image_size", "image size (0 = the model's)"},
      {"freeze", "frozen parameters"},
      {"freeze_layers", "frozen leading blocks"},
      {"lora", "LoRA rank (0 = none)"},
      {"augment", "augmentation"},
      {"pos_weight", "positive-class weighting"},
      {"seed", "seed"},
      {"pipeline_stages", "pipeline stages"},
  };
  std::string out = "| setting | value |\n| --- | --- |\n";
  for (const auto& [key, name] : keys) {
    const std::string v = option_text(o, key);
    if (!v.empty()) out += "| " + name + " | " + markdown_cell(v) + " |\n";
  }
  return out;
}

std::string split_counts(const json& data) {
  if (!data.is_object() || !data.contains("splits") || !data["splits"].is_object()) return "";
  std::string out = "| split | images | patients |\n| --- | ---: | ---: |\n";
  for (const char* split : {"train", "val", "test"}) {
    if (!data["splits"].contains(split)) continue;
    const json& s = data["splits"][split];
    const auto count = [&](const char* key) {
      return s.contains(key) && s[key].is_number_integer() ? with_commas(s[key].get<int64_t>()) : "not known";
    };
    out += std::string("| ") + split + " | " + count("images") + " | " + count("patients") + " |\n";
  }
  return out;
}

std::string interval_text(const std::vector<std::optional<ConfidenceInterval>>& cis, size_t l) {
  if (cis.empty()) return kNotEvaluated;
  if (!cis[l]) return "undefined";
  return fixed(cis[l]->low) + " to " + fixed(cis[l]->high);
}

std::string results_section(const CardInputs& in) {
  std::string out = "## Results\n\n";
  if (!in.results_withheld.empty()) {
    return out + "Not evaluated: " + in.results_withheld +
           ". Evaluate these weights with `vitpipe eval --model DIR --data SPEC --split test --bootstrap 1000`.\n\n" +
           "## Calibration\n\nNot evaluated.\n\n";
  }
  if (in.results.empty()) {
    return out + "Not evaluated: no split was evaluated for this model" +
           (in.options.run_dir.empty() ? " (no training run is known for it)" : "") + ".\n\n" +
           "## Calibration\n\nNot evaluated.\n\n";
  }
  bool has_test = false;
  for (const SplitResult& r : in.results) {
    has_test = has_test || r.split == "test";
    const auto& auc = r.metrics.roc_auc;
    const std::string unit = r.ci_unit.empty() ? "" : r.ci_unit;
    out += "### " + r.split + " split (" + with_commas(r.rows) + " images" +
           (r.patients > 0 ? ", " + with_commas(r.patients) + " patients" : "") + ")\n\n";
    out += "ROC-AUC per finding (sigmoid scores, scikit-learn's definition) with its 95% confidence interval";
    out += unit.empty() ? ": not evaluated.\n\n"
                        : " from " + std::to_string(in.options.bootstrap) + " bootstrap resamples of " + unit +
                              "s (unit: " + unit + ").\n\n";
    out += "| finding | positives | ROC-AUC | 95% CI | PR-AUC |\n| --- | ---: | ---: | --- | ---: |\n";
    for (size_t l = 0; l < r.labels.size(); ++l) {
      const auto& v = auc.per_label[l];
      const auto& ap = r.metrics.average_precision.per_label[l];
      out += "| " + markdown_cell(r.labels[l]) + " | " + std::to_string(r.metrics.positives[l]) + " | " +
             (v ? fixed(*v) : "undefined (one class)") + " | " + (v ? interval_text(auc.per_label_ci, l) : "") + " | " +
             (ap ? fixed(*ap) : "undefined") + " |\n";
    }
    out += "| **mean** (" + std::to_string(auc.defined_labels) + " defined) | | " +
           (auc.mean ? "**" + fixed(*auc.mean) + "**" : "undefined") + " | " +
           (auc.mean_ci ? fixed(auc.mean_ci->low) + " to " + fixed(auc.mean_ci->high)
                        : std::string(unit.empty() ? kNotEvaluated : "undefined")) +
           " | " + (r.metrics.average_precision.mean ? fixed(*r.metrics.average_precision.mean) : "undefined") +
           " |\n\n";
  }
  if (!has_test) out += "Test split: not evaluated (train without `--test`).\n\n";

  out += "## Calibration\n\n";
  out +=
      "Expected calibration error of the predicted probabilities over every (image, finding) pair, 10 equal-width "
      "bins:\n\n| split | pairs | ECE |\n| --- | ---: | ---: |\n";
  for (const SplitResult& r : in.results) {
    out += "| " + r.split + " | " + with_commas(r.calibration.count) + " | " +
           (r.calibration.count > 0 ? fixed(r.calibration.expected_calibration_error, 4) : kNotEvaluated) + " |\n";
  }
  return out + "\n";
}

std::string operating_points_section(const CardInputs& in) {
  std::string out = "## Operating points\n\n";
  if (!in.thresholds || !in.results_withheld.empty()) {
    return out +
           "Not evaluated: no thresholds were chosen for these weights (train chooses them on the validation "
           "split and writes thresholds.json).\n\n";
  }
  const ThresholdSet& t = *in.thresholds;
  const SplitResult* test = nullptr;
  for (const SplitResult& r : in.results)
    if (r.split == "test") test = &r;
  out += "Thresholds on the predicted probability, chosen on the **" + t.chosen_on +
         "** split (a finding is flagged when its probability >= the threshold): Youden's J and the highest threshold "
         "reaching 90% sensitivity";
  out += test ? ", with the sensitivity and specificity they give on the test split.\n\n"
              : ". Test split: not evaluated.\n\n";
  out +=
      "| finding | Youden threshold | test sens. / spec. | 90%-sensitivity threshold | test sens. / spec. |\n"
      "| --- | ---: | --- | ---: | --- |\n";
  for (size_t l = 0; l < t.labels.size(); ++l) {
    std::optional<OperatingPoint> youden, sensitive;
    if (test) {
      const auto it = std::find(test->labels.begin(), test->labels.end(), t.labels[l]);
      if (it != test->labels.end() && !test->points.empty()) {
        const auto& p = test->points[static_cast<size_t>(it - test->labels.begin())];
        youden = p.youden;
        sensitive = p.sensitivity_90;
      }
    }
    const auto point = [&](const std::optional<OperatingPoint>& p) {
      return p ? fixed(p->sensitivity()) + " / " + fixed(p->specificity()) : std::string(kNotEvaluated);
    };
    out += "| " + markdown_cell(t.labels[l]) + " | " + (t.youden[l] ? fixed(*t.youden[l], 4) : "undefined") + " | " +
           point(youden) + " | " + (t.sensitivity_90[l] ? fixed(*t.sensitivity_90[l], 4) : "undefined") + " | " +
           point(sensitive) + " |\n";
  }
  return out + "\nThe thresholds are in the run's `thresholds.json`; `vitpipe eval --thresholds` applies them.\n\n";
}

std::string data_section(const CardInputs& in, const DatasetInfo& dataset) {
  std::string out = "## Training data and protocol\n\n";
  if (in.options.run_dir.empty() || !in.train_options.is_object()) {
    return out + "Not known: no training run is recorded with this model (train_options.json absent).\n\n";
  }
  const json& o = in.train_options;
  out += "- Dataset: " + dataset.name + " (`" + dataset.kind + ":" + dataset.location + "`).\n";
  if (dataset.kind == "chestxray14") {
    out +=
        "- Split: the official patient-disjoint split (`train_val_list.txt` / `test_list.txt`); validation "
        "patients (a fraction " +
        option_text(o, "val_fraction") +
        ") are held out of the official train_val list, so no patient is in two splits.\n";
    out +=
        "- Labels: the 14 findings of ChestX-ray14, mined from radiology reports by NLP (the dataset's own "
        "labels, not radiologist reads); \"No Finding\" is " +
        std::string(option_text(o, "add_no_finding") == "true" ? "an added label" : "not a label") + ".\n";
  } else {
    out += "- Validation: a fraction " + option_text(o, "val_fraction") +
           " of the training patients, held out by patient.\n";
  }
  const std::string uncertain = option_text(o, "uncertain"), vote = option_text(o, "label_vote");
  if (!uncertain.empty())
    out += "- Uncertain labels: " + uncertain + " (masked labels are left out of loss and AUC).\n";
  if (!vote.empty() && dataset.kind != "chestxray14") out += "- Label vote across readers: " + vote + ".\n";
  const std::string counts = split_counts(in.data);
  out += counts.empty() ? "\nImage and patient counts: not recorded.\n\n" : "\n" + counts + "\n";
  out += "### Hyperparameters\n\n" + hyperparameters(o) + "\n";
  return out;
}

std::string how_to_use(const CardInputs& in) {
  std::string out = "## How to use\n\n";
  if (in.options.adapter) {
    out += "A peft LoRA adapter" + (in.base_model.empty() ? "" : " for `" + in.base_model + "`") +
           ":\n\n```python\nfrom peft import PeftModel\nfrom transformers import AutoModelForImageClassification\n"
           "base = AutoModelForImageClassification.from_pretrained(\"" +
           (in.base_model.empty() ? std::string("BASE_MODEL") : in.base_model) +
           "\")\n"
           "model = PeftModel.from_pretrained(base, \"PATH_OR_REPO\")\n```\n\n";
    return out;
  }
  out +=
      "With transformers (multi-label: each finding's own sigmoid probability, not a softmax; top_k: every label):\n\n"
      "```python\nfrom transformers import pipeline\n"
      "classifier = pipeline(\"image-classification\", model=\"PATH_OR_REPO\", function_to_apply=\"sigmoid\", "
      "top_k=" +
      std::to_string(in.config ? std::max<int64_t>(in.config->num_labels(), 1) : 5) +  // the default, 5, drops labels
      ")\n"
      "print(classifier(\"chest_xray.png\"))\n```\n\n"
      "With vitpipe (PNG, JPEG or DICOM; `--heatmap DIR` also writes where the model looked):\n\n"
      "```sh\nvitpipe predict --model PATH_OR_REPO chest_xray.png\n```\n\n"
      "As ONNX (`pixel_values` -> `logits`, opset 17):\n\n"
      "```sh\nvitpipe export PATH_OR_REPO --format onnx --out model.onnx\n```\n\n";
  return out;
}

std::string nih_attribution() {
  return "## Dataset attribution\n\n"
         "The training images come from the NIH ChestX-ray14 dataset, provided by the NIH Clinical Center "
         "(https://nihcc.app.box.com/v/ChestXray-NIHCC). We acknowledge the NIH Clinical Center as the data "
         "provider.\n\n"
         "Citation: Xiaosong Wang, Yifan Peng, Le Lu, Zhiyong Lu, Mohammadhadi Bagheri, Ronald M. Summers. "
         "\"ChestX-ray8: Hospital-scale Chest X-ray Database and Benchmarks on Weakly-Supervised Classification and "
         "Localization of Common Thorax Diseases\", IEEE CVPR 2017.\n\n";
}

std::string marker(const ModelCardOptions& o) {
  json source = json::object();
  if (!o.run_dir.empty()) source["run"] = fs::absolute(o.run_dir).lexically_normal().string();
  if (o.step) source["step"] = *o.step;
  if (!o.license.empty()) source["license"] = o.license;
  if (!o.base_model.empty()) source["base_model"] = o.base_model;
  if (o.adapter) source["adapter"] = true;
  // "--" may not appear inside an HTML comment.
  std::string text = safe_dump(source);
  for (size_t at = text.find("--"); at != std::string::npos; at = text.find("--", at)) text.replace(at, 2, "-\\u002d");
  return std::string(kMarker) + " generated from the run's files; `vitpipe card DIR` regenerates it. source: " + text +
         " -->\n";
}

}  // namespace

std::string model_card_markdown(const fs::path& model_dir, const ModelCardOptions& options) {
  const CardInputs in = read_inputs(model_dir, options);
  const DatasetInfo dataset = dataset_info(in.data.is_object()            ? in.data.value("dataset", "")
                                           : in.train_options.is_object() ? in.train_options.value("data", "")
                                                                          : "");
  std::string md = front_matter(in, dataset);
  md += marker(options) + "\n";
  md += "# " + model_name(in) + "\n\n";

  // What the model is.
  if (in.config) {
    const ViTConfig& c = *in.config;
    md +=
        "A " + family_name(c.model_type) + " image classifier" + (in.options.adapter ? " adapter (peft LoRA)" : "") +
        (in.train_options.is_object() ? " fine-tuned with vitpipe" : "") +
        (in.base_model.empty() ? "" : " from [`" + in.base_model + "`](https://huggingface.co/" + in.base_model + ")") +
        " to flag findings on chest radiographs" +
        (in.train_options.is_object() ? "" : "; how it was trained is not recorded with it") + ".\n\n";
    md += "- Family: " + family_name(c.model_type) + " (`" + c.model_type + "`), " +
          std::to_string(c.num_hidden_layers) + " layers, hidden size " + std::to_string(c.hidden_size) + ", " +
          std::to_string(c.num_attention_heads) + " heads, patch " + std::to_string(c.patch_size) + "\n";
    md += "- Parameters: " + (in.parameters ? with_commas(*in.parameters) : std::string("not counted")) + "\n";
    md += "- Input: " + image_size_text(in) + " pixels, 3 channels (grayscale radiographs replicated)\n";
    md += std::string("- Output: ") +
          (c.problem_type == ProblemType::multi_label ? "one independent sigmoid probability per label"
                                                      : "a softmax over the labels") +
          "\n";
    std::string labels;
    for (const auto& l : c.labels) labels += (labels.empty() ? "" : ", ") + l;
    md += "- Labels (" + std::to_string(c.labels.size()) + "): " + labels + "\n\n";
  } else {
    md += "A vitpipe model" + std::string(in.options.adapter ? " adapter (peft LoRA)" : "") +
          (in.parameters ? " (" + with_commas(*in.parameters) + " parameters)" : "") +
          "; its architecture is that of its base model.\n\n";
  }

  md +=
      "License: " +
      (in.options.license.empty()
           ? std::string("not declared (pass --license; the base model's and the data's terms apply)")
           : "`" + in.options.license + "`" + (in.license_source.empty() ? "" : " (from " + in.license_source + ")")) +
      ".\n\n";
  md +=
      "## Intended use\n\n"
      "Research on automated chest X-ray reading: benchmarking, method development, teaching. **This model is not a "
      "medical device.** It has not been cleared or approved by any regulator and must not be used to diagnose, "
      "treat or triage patients.\n\n"
      "## Out-of-scope use\n\n"
      "- Clinical decisions of any kind, with or without a clinician in the loop.\n"
      "- Populations, hospitals, scanners, projections or age groups other than those of the training data: it has "
      "not been validated on them.\n"
      "- Findings not among its labels; images that are not frontal chest radiographs.\n\n";
  md += data_section(in, dataset);
  md += results_section(in);
  md += operating_points_section(in);
  md += card_subgroup_section(in.subgroup_split, in.subgroups,
                              !in.results_withheld.empty() ? in.results_withheld
                              : in.options.run_dir.empty() ? "no training run is known for this model"
                                                           : "no split was evaluated for this model",
                              in.options.bootstrap);

  md +=
      "## Limitations\n\n"
      "- Labels mined from radiology reports are noisy: a finding the report omits counts as absent, and "
      "the text mining itself errs; AUCs against such labels are not AUCs against radiologists' reads.\n"
      "- Dataset shift: performance on another hospital's images (other scanners, protocols, populations, "
      "prevalence) can be much lower than on held-out images of the same source.\n"
      "- Shortcuts: models of this kind can learn markers of the acquisition (portable films, chest tubes, text) "
      "instead of the finding itself.\n"
      "- Thresholds are chosen on a validation split of the training source; at another prevalence their "
      "sensitivity and specificity change.\n";
  if (!in.results.empty() && in.results.front().rows < 1000)
    md += "- Small evaluation: the splits above have few images, so the intervals are wide.\n";
  md += "\n" + how_to_use(in);
  if (dataset.kind == "chestxray14") md += nih_attribution();
  return md;
}

bool is_vitpipe_model_card(const std::string& text) { return text.find(kMarker) != std::string::npos; }

std::optional<ModelCardOptions> model_card_source(const std::string& text) {
  const size_t at = text.find(kMarker);
  if (at == std::string::npos) return std::nullopt;
  const size_t begin = text.find("source: ", at), end = text.find(" -->", at);
  if (begin == std::string::npos || end == std::string::npos || begin > end) return std::nullopt;
  json source;
  try {
    source = json::parse(text.substr(begin + 8, end - begin - 8));
  } catch (const json::exception&) {
    return std::nullopt;
  }
  if (!source.is_object()) return std::nullopt;
  ModelCardOptions o;
  o.run_dir = source.value("run", "");
  if (source.contains("step") && source["step"].is_number_integer()) o.step = source["step"].get<int64_t>();
  o.license = source.value("license", "");
  o.base_model = source.value("base_model", "");
  o.adapter = source.value("adapter", false);
  return o;
}

fs::path write_model_card(const fs::path& model_dir, const ModelCardOptions& options) {
  const fs::path readme = model_dir / "README.md";
  if (fs::exists(readme) && !options.force) {
    VP_REQUIRE(is_vitpipe_model_card(read_text_file(readme)), readme.string(),
               ": a README.md vitpipe did not write is there; not replaced (pass --force to replace it)");
  }
  const std::string text = model_card_markdown(model_dir, options);  // everything read before anything is written
  write_text_file_atomically(readme, text);
  return readme;
}

}  // namespace vitpipe
