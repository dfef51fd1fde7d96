#include "serve/served_thresholds.h"

#include <algorithm>

#include "report/model_card.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe {

namespace fs = std::filesystem;

std::optional<ServedThresholds> find_served_thresholds(const fs::path& model_dir, const std::string& explicit_file) {
  if (!explicit_file.empty()) return ServedThresholds{read_thresholds_file(explicit_file), "--thresholds"};
  if (fs::is_regular_file(model_dir / "thresholds.json"))
    return ServedThresholds{read_thresholds_file(model_dir / "thresholds.json"),
                            "the model directory's thresholds.json"};
  const fs::path readme = model_dir / "README.md";
  if (!fs::is_regular_file(readme)) return std::nullopt;
  const std::optional<ModelCardOptions> source = model_card_source(read_text_file(readme));
  if (!source || source->run_dir.empty() || !fs::is_regular_file(source->run_dir / "thresholds.json"))
    return std::nullopt;
  ThresholdSet thresholds = read_thresholds_file(source->run_dir / "thresholds.json");
  // An export of one checkpoint: the run's thresholds belong to the step it evaluated, as the card's results do.
  if (source->step && (!thresholds.step || *thresholds.step != *source->step)) return std::nullopt;
  return ServedThresholds{std::move(thresholds), "the training run's thresholds.json (named by the model card)"};
}

nlohmann::json served_thresholds_json(const std::optional<ServedThresholds>& served,
                                      const std::vector<std::string>& labels) {
  if (!served) return nullptr;
  const ThresholdSet& t = served->thresholds;
  nlohmann::json findings = nlohmann::json::object();
  for (const auto& label : labels) {
    const auto it = std::find(t.labels.begin(), t.labels.end(), label);
    const size_t l = static_cast<size_t>(it - t.labels.begin());
    const auto value = [&](const std::vector<std::optional<double>>& v) -> nlohmann::json {
      if (it == t.labels.end() || !v[l]) return nullptr;
      return *v[l];
    };
    findings[label] = {{"youden", value(t.youden)}, {"sensitivity_90", value(t.sensitivity_90)}};
  }
  return {{"chosen_on", t.chosen_on},
          {"step", t.step ? nlohmann::json(*t.step) : nlohmann::json()},
          {"source", served->source},
          {"findings", findings}};
}

}  // namespace vitpipe
