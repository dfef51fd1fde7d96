#include "train/evaluation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include "data/loader.h"
#include "train/batch_source.h"
#include "util/error.h"
#include "util/progress.h"

namespace vitpipe {
namespace {

nlohmann::json optional_value(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// Rows [begin, end) of each replica's share of a global batch of `rows` (epoch_plan.h's rule).
int64_t replica_rows(int64_t rows, int replica, int replicas) {
  return (replica + 1) * rows / replicas - replica * rows / replicas;
}

std::vector<int64_t> micro_batch_sizes(int64_t rows, int64_t micro_batch) {
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < rows; at += micro_batch) sizes.push_back(std::min(micro_batch, rows - at));
  return sizes;
}

}  // namespace

nlohmann::json EvaluationReport::to_json() const {
  nlohmann::json auc = nlohmann::json::object(), pr = nlohmann::json::object();
  for (size_t l = 0; l < labels.size(); ++l) {
    auc[labels[l]] = optional_value(metrics.roc_auc.per_label[l]);
    pr[labels[l]] = optional_value(metrics.average_precision.per_label[l]);
  }
  nlohmann::json j = {{"split", split},
                      {"rows", rows},
                      {"loss", loss},
                      {"auc", auc},
                      {"mean_auc", optional_value(metrics.roc_auc.mean)},
                      {"pr_auc", pr},
                      {"mean_pr_auc", optional_value(metrics.average_precision.mean)},
                      {"detail", metrics_to_json(metrics, labels)}};
  if (!label_mapping.is_null()) j["label_mapping"] = label_mapping;
  if (!metrics.known.empty()) {
    nlohmann::json known = nlohmann::json::object();
    for (size_t l = 0; l < labels.size(); ++l) known[labels[l]] = metrics.known[l];
    j["known"] = known;
  }
  if (!metrics.roc_auc.per_label_ci.empty()) {
    nlohmann::json ci = nlohmann::json::object();
    for (size_t l = 0; l < labels.size(); ++l) {
      const auto& interval = metrics.roc_auc.per_label_ci[l];
      ci[labels[l]] = interval ? nlohmann::json::array({interval->low, interval->high}) : nlohmann::json(nullptr);
    }
    j["auc_ci"] = ci;
    const auto& mean_ci = metrics.roc_auc.mean_ci;
    j["mean_auc_ci"] = mean_ci ? nlohmann::json::array({mean_ci->low, mean_ci->high}) : nlohmann::json(nullptr);
    for (const auto& interval : metrics.roc_auc.per_label_ci) {
      if (interval) j["ci_unit"] = interval->unit;
    }
  }
  j["operating_points"] = nullptr;
  if (thresholds) {
    nlohmann::json per_label = nlohmann::json::object();
    for (size_t l = 0; l < labels.size(); ++l) {
      per_label[labels[l]] = {{"youden", operating_point_json(operating_points[l].youden)},
                              {"sensitivity_90", operating_point_json(operating_points[l].sensitivity_90)}};
    }
    j["operating_points"] = {{"source",
                              {{"file", thresholds->file},
                               {"chosen_on", thresholds->chosen_on},
                               {"step", thresholds->step ? nlohmann::json(*thresholds->step) : nlohmann::json()},
                               {"data", thresholds->data}}},
                             {"optimistic", thresholds_optimistic},
                             {"per_label", per_label}};
  }
  return j;
}

std::vector<double> EvaluationReport::probabilities() const {
  std::vector<double> p(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    p[i] = scores_are_logits ? 1.0 / (1.0 + std::exp(-double{scores[i]})) : double{scores[i]};
  }
  return p;
}

void EvaluationReport::apply(const ThresholdSet& chosen, const std::string& data) {
  thresholds = chosen;
  thresholds_optimistic = tuned_on(chosen, split, data);
  operating_points = apply_thresholds(chosen, labels, probabilities(), targets, weights);
}

std::string EvaluationReport::table() const {
  std::ostringstream out;
  char line[256];
  const bool ci = !metrics.roc_auc.per_label_ci.empty();
  const bool masked =
      std::any_of(metrics.known.begin(), metrics.known.end(), [&](int64_t known) { return known != metrics.rows; });
  std::string unit;
  for (const auto& interval : metrics.roc_auc.per_label_ci) {
    if (interval) unit = interval->unit;
  }
  const std::string ci_header =
      "   95% CI (ROC-AUC, resampling " + (unit.empty() ? std::string("images") : unit + "s") + ")";
  std::snprintf(line, sizeof(line), "%-20s %9s%s %8s %8s%s\n", "finding", "positives", masked ? "     known" : "",
                "ROC-AUC", "PR-AUC", ci ? ci_header.c_str() : "");
  out << line;
  auto number = [](const std::optional<double>& v) {
    char text[16];
    if (v) {
      std::snprintf(text, sizeof(text), "%.4f", *v);
    } else {
      std::snprintf(text, sizeof(text), "n/a");
    }
    return std::string(text);
  };
  for (size_t l = 0; l < labels.size(); ++l) {
    std::string interval;
    if (ci && metrics.roc_auc.per_label_ci[l]) {
      char text[48];
      std::snprintf(text, sizeof(text), "   [%.4f, %.4f]", metrics.roc_auc.per_label_ci[l]->low,
                    metrics.roc_auc.per_label_ci[l]->high);
      interval = text;
    }
    char known[24] = "";
    if (masked) std::snprintf(known, sizeof(known), " %9lld", static_cast<long long>(metrics.known[l]));
    std::snprintf(line, sizeof(line), "%-20s %9lld%s %8s %8s%s\n", labels[l].c_str(),
                  static_cast<long long>(metrics.positives[l]), known, number(metrics.roc_auc.per_label[l]).c_str(),
                  number(metrics.average_precision.per_label[l]).c_str(), interval.c_str());
    out << line;
  }
  std::string mean_interval;
  if (ci && metrics.roc_auc.mean_ci) {
    char text[48];
    std::snprintf(text, sizeof(text), "   [%.4f, %.4f]", metrics.roc_auc.mean_ci->low, metrics.roc_auc.mean_ci->high);
    mean_interval = text;
  }
  std::snprintf(line, sizeof(line), "%-20s %9s%s %8s %8s%s\n", "mean (defined)", "", masked ? "          " : "",
                number(metrics.roc_auc.mean).c_str(), number(metrics.average_precision.mean).c_str(),
                mean_interval.c_str());
  out << line;
  if (thresholds) {
    const ThresholdSet& t = *thresholds;
    out << "operating points at thresholds chosen on the " << t.chosen_on << " split"
        << (t.step ? " (model step " + std::to_string(*t.step) + ")" : std::string()) << ", from " << t.file
        << (thresholds_optimistic ? ": tuned on this split itself, OPTIMISTIC\n" : ", applied unchanged\n");
    std::snprintf(line, sizeof(line), "%-20s %9s %6s %6s   %9s %6s %6s\n", "finding", "Youden p", "sens", "spec",
                  "90%-sens p", "sens", "spec");
    out << line;
    auto cells = [](const std::optional<OperatingPoint>& op) {
      char text[48];
      if (op) {
        std::snprintf(text, sizeof(text), "%9.4f %6.3f %6.3f", op->threshold, op->sensitivity(), op->specificity());
      } else {
        std::snprintf(text, sizeof(text), "%9s %6s %6s", "n/a", "", "");
      }
      return std::string(text);
    };
    for (size_t l = 0; l < labels.size(); ++l) {
      std::snprintf(line, sizeof(line), "%-20s %s   %s\n", labels[l].c_str(), cells(operating_points[l].youden).c_str(),
                    cells(operating_points[l].sensitivity_90).c_str());
      out << line;
    }
  }
  return out.str();
}

EvaluationReport evaluate_split(PipelineExecutor& executor, Communicator& world,
                                const std::shared_ptr<const Dataset>& dataset, Split split,
                                const PreprocessorConfig& preprocessor, const EvaluationSettings& settings) {
  const ProcessGrid& grid = executor.grid();
  const std::vector<int64_t> items = dataset->split_indices(split);
  const int64_t total = static_cast<int64_t>(items.size());
  VP_REQUIRE(total > 0, dataset->spec(), ": the ", split_name(split), " split has no images to evaluate");
  const int64_t labels = dataset->num_labels();
  const bool multi_label = dataset->multi_label();
  const int replicas = grid.replicas();
  const int64_t global_batch = settings.micro_batch * settings.micro_batches * replicas;
  const int64_t steps = (total + global_batch - 1) / global_batch;

  std::unique_ptr<Loader> loader;
  if (grid.first_stage() && total > 0) {
    LoaderOptions options = evaluation_loader_options(global_batch);
    options.replica_index = grid.replica();
    options.replica_count = replicas;
    options.threads = settings.loader_threads;
    loader = std::make_unique<Loader>(dataset, items, preprocessor, options);
    loader->start_epoch(0, 0);
  }

  // Last stage: scores, targets, label weights and items of this replica's rows, and the loss summed in double.
  const bool weighted = multi_label && dataset->has_masked_labels();
  std::vector<float> scores, targets, weights;
  std::vector<int64_t> rows_items;
  double loss_sum = 0, loss_weight = 0;
  const LogitsSink sink = [&](const Tensor& logits, const Tensor& target, const Tensor& weight,
                              const std::vector<int64_t>& batch_items) {
    const int64_t b = logits.dim(0);
    const float* x = logits.f32();
    for (int64_t r = 0; r < b; ++r) {
      if (multi_label) {
        for (int64_t l = 0; l < labels; ++l) {
          const double z = x[r * labels + l], y = target.f32()[r * labels + l];
          const double w = weighted ? weight.f32()[r * labels + l] : 1.0;
          loss_sum += w * (std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::fabs(z))));
          loss_weight += w;
          // Ranked by the logit: the sigmoid is increasing, so the ROC-AUC and PR-AUC are the probabilities', but
          // rounding probabilities to float would tie distinct ones near 0.5 and 1 (`predict` prints them exactly).
          scores.push_back(static_cast<float>(z));
          targets.push_back(static_cast<float>(y));
          if (weighted) weights.push_back(static_cast<float>(w));
        }
      } else {
        const int64_t cls = target.data<int64_t>()[r];
        double max = x[r * labels];
        for (int64_t l = 1; l < labels; ++l) max = std::max(max, static_cast<double>(x[r * labels + l]));
        double sum = 0;
        for (int64_t l = 0; l < labels; ++l) sum += std::exp(x[r * labels + l] - max);
        loss_sum += std::log(sum) + max - x[r * labels + cls];
        loss_weight += 1;
        for (int64_t l = 0; l < labels; ++l) {
          scores.push_back(static_cast<float>(std::exp(x[r * labels + l] - max) / sum));
          targets.push_back(l == cls ? 1.0f : 0.0f);
        }
      }
      rows_items.push_back(batch_items[static_cast<size_t>(r)]);
    }
  };

  std::unique_ptr<ProgressBar> progress;
  if (settings.progress)
    progress = std::make_unique<ProgressBar>(concat("evaluating ", split_name(split)), total, "img");
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t rows = std::min(global_batch, total - step * global_batch);
    const int64_t mine = replica_rows(rows, grid.replica(), replicas);
    if (mine == 0) continue;  // a tiny last batch: this replica has nothing (all its stages agree)
    StepShape shape;
    shape.micro_batch_sizes = micro_batch_sizes(mine, settings.micro_batch);
    shape.global_rows = rows;
    if (weighted) shape.global_label_weight = 0;  // carries the weights; forward passes need no denominator
    Batch batch;
    if (loader) {
      VP_REQUIRE(loader->next(&batch) && batch.size() == mine, "evaluation loader out of step at batch ", step);
    }
    const MicroBatchSource source = micro_batches_of(batch, shape.micro_batch_sizes, multi_label);
    executor.forward_only(shape, source, sink);
    if (progress) progress->update(std::min(total, (step + 1) * global_batch));
  }
  if (progress) progress->finish();

  // Gather every last stage's rows on rank 0.
  const bool contributes = grid.last_stage();
  std::vector<std::byte> packed;
  if (contributes) {
    const int64_t n = static_cast<int64_t>(rows_items.size());
    const int64_t planes = weighted ? 3 : 2;  // scores, targets (, weights)
    packed.resize(sizeof(int64_t) + static_cast<size_t>(n) * (sizeof(int64_t) + planes * labels * sizeof(float)) +
                  2 * sizeof(double));
    std::byte* at = packed.data();
    std::memcpy(at, &n, sizeof(n));
    at += sizeof(n);
    std::memcpy(at, &loss_sum, sizeof(loss_sum));
    at += sizeof(loss_sum);
    std::memcpy(at, &loss_weight, sizeof(loss_weight));
    at += sizeof(loss_weight);
    std::memcpy(at, rows_items.data(), static_cast<size_t>(n) * sizeof(int64_t));
    at += n * sizeof(int64_t);
    std::memcpy(at, scores.data(), scores.size() * sizeof(float));
    at += scores.size() * sizeof(float);
    std::memcpy(at, targets.data(), targets.size() * sizeof(float));
    at += targets.size() * sizeof(float);
    if (weighted) std::memcpy(at, weights.data(), weights.size() * sizeof(float));
  }
  auto gathered = world.gather_bytes(packed, 0);
  EvaluationReport report;
  report.split = split_name(split);
  report.labels = dataset->label_names();
  if (world.rank() != 0) return report;

  std::vector<int64_t> all_items;
  std::vector<float> all_scores, all_targets, all_weights;
  double all_loss = 0, all_loss_weight = 0;
  for (const auto& bytes : gathered) {
    if (bytes.empty()) continue;
    const std::byte* at = bytes.data();
    int64_t n = 0;
    double loss = 0, weight = 0;
    std::memcpy(&n, at, sizeof(n));
    at += sizeof(n);
    std::memcpy(&loss, at, sizeof(loss));
    at += sizeof(loss);
    std::memcpy(&weight, at, sizeof(weight));
    at += sizeof(weight);
    all_loss += loss;
    all_loss_weight += weight;
    const size_t old = all_items.size();
    all_items.resize(old + static_cast<size_t>(n));
    std::memcpy(all_items.data() + old, at, static_cast<size_t>(n) * sizeof(int64_t));
    at += n * sizeof(int64_t);
    const size_t old_values = all_scores.size();
    all_scores.resize(old_values + static_cast<size_t>(n * labels));
    all_targets.resize(old_values + static_cast<size_t>(n * labels));
    std::memcpy(all_scores.data() + old_values, at, static_cast<size_t>(n * labels) * sizeof(float));
    at += n * labels * sizeof(float);
    std::memcpy(all_targets.data() + old_values, at, static_cast<size_t>(n * labels) * sizeof(float));
    at += n * labels * sizeof(float);
    if (weighted) {
      all_weights.resize(old_values + static_cast<size_t>(n * labels));
      std::memcpy(all_weights.data() + old_values, at, static_cast<size_t>(n * labels) * sizeof(float));
    }
  }
  VP_REQUIRE(static_cast<int64_t>(all_items.size()) == total, "evaluation gathered ", all_items.size(), " rows of ",
             total);
  // Dataset order, so the result (and its bootstrap) does not depend on the layout that computed it.
  std::vector<size_t> order(all_items.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return all_items[a] < all_items[b]; });
  std::vector<float> sorted_scores(all_scores.size()), sorted_targets(all_targets.size()),
      sorted_weights(all_weights.size());
  for (size_t r = 0; r < order.size(); ++r) {
    std::copy_n(all_scores.begin() + static_cast<std::ptrdiff_t>(order[r] * labels), labels,
                sorted_scores.begin() + static_cast<std::ptrdiff_t>(r * labels));
    std::copy_n(all_targets.begin() + static_cast<std::ptrdiff_t>(order[r] * labels), labels,
                sorted_targets.begin() + static_cast<std::ptrdiff_t>(r * labels));
    if (weighted)
      std::copy_n(all_weights.begin() + static_cast<std::ptrdiff_t>(order[r] * labels), labels,
                  sorted_weights.begin() + static_cast<std::ptrdiff_t>(r * labels));
  }
  report.rows = total;
  report.loss = all_loss_weight > 0 ? all_loss / all_loss_weight : 0.0;  // mean over the known elements
  report.metrics = evaluate_multilabel(sorted_scores, sorted_targets, labels, settings.bootstrap, sorted_weights);
  report.scores_are_logits = multi_label;
  report.items.resize(order.size());
  for (size_t r = 0; r < order.size(); ++r) report.items[r] = all_items[order[r]];
  report.scores = std::move(sorted_scores);
  report.targets = std::move(sorted_targets);
  if (weighted) report.weights = std::move(sorted_weights);
  return report;
}

}  // namespace vitpipe
