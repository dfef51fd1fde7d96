#include "data/label_harmonisation.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/chestxray14_findings.h"
#include "data/chexpert_observations.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_error_detail.h"

namespace vitpipe {
namespace {

// Lower case, '_' and runs of blanks as one space, trimmed.
std::string normalised(const std::string& name) {
  std::string out;
  for (char c : name) {
    const char d = c == '_' ? ' ' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (d == ' ' && (out.empty() || out.back() == ' ')) continue;
    out.push_back(d);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// Names of one finding across ChestX-ray14, CheXpert / MIMIC-CXR, PadChest and VinDr-CXR (normalised).
const std::vector<std::vector<std::string>>& synonym_groups() {
  static const std::vector<std::vector<std::string>> groups = {
      {"effusion", "pleural effusion"},   {"edema", "pulmonary edema", "oedema"},
      {"fibrosis", "pulmonary fibrosis"}, {"hernia", "hiatal hernia", "hiatus hernia"},
      {"infiltration", "infiltrates"},    {"no finding", "normal"},
      {"mass", "pulmonary mass"},         {"nodule", "pulmonary nodule"},
  };
  return groups;
}

// The key two names share when they mean the same finding.
std::string key_of(const std::string& name) {
  const std::string n = normalised(name);
  for (const auto& group : synonym_groups())
    if (std::find(group.begin(), group.end(), n) != group.end()) return group.front();
  return n;
}

LabelSet union_set() {
  LabelSet set;
  set.names = chestxray14_findings();
  for (const auto& name : chexpert_observations()) {
    const bool shared = std::any_of(set.names.begin(), set.names.end(),
                                    [&](const std::string& have) { return key_of(have) == key_of(name); });
    if (!shared) set.names.push_back(name);
  }
  return set;
}

LabelSet label_set_file(const std::filesystem::path& path) {
  nlohmann::json j;
  const std::string text = read_text_file(path);
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path.string(), ": not valid JSON", json_error_detail(e, text));
  }
  VP_REQUIRE(j.is_object() && j.contains("labels") && j["labels"].is_array() && !j["labels"].empty(), path.string(),
             ": expected {\"labels\": [names...], \"synonyms\": {\"dataset name\": \"label\"}}");
  LabelSet set;
  for (const auto& name : j["labels"]) {
    VP_REQUIRE(name.is_string() && !name.get<std::string>().empty(), path.string(),
               ": field \"labels\" must hold non-empty strings, got ", name.dump());
    set.names.push_back(name.get<std::string>());
  }
  if (j.contains("synonyms")) {
    VP_REQUIRE(j["synonyms"].is_object(), path.string(), ": field \"synonyms\" must be an object");
    for (const auto& [from, to] : j["synonyms"].items()) {
      VP_REQUIRE(
          to.is_string() && std::find(set.names.begin(), set.names.end(), to.get<std::string>()) != set.names.end(),
          path.string(), ": synonym \"", from, "\" maps to ", to.dump(), ", which is not in \"labels\"");
      set.synonyms[from] = to.get<std::string>();
    }
  }
  return set;
}

}  // namespace

LabelSet named_label_set(const std::string& spec) {
  if (spec == "chestxray14") return LabelSet{chestxray14_findings(), {}};
  if (spec == "chexpert") return LabelSet{chexpert_observations(), {}};
  if (spec == "union") return union_set();
  VP_REQUIRE(std::filesystem::is_regular_file(spec), "--labels ", spec,
             ": expected chestxray14, chexpert, union or a JSON file of labels (no such file)");
  return label_set_file(spec);
}

LabelMapping map_labels(const std::vector<std::string>& dataset_labels, const LabelSet& target) {
  LabelMapping m;
  m.names = target.names;
  m.source.assign(target.names.size(), -1);
  std::vector<bool> used(dataset_labels.size(), false);
  auto take = [&](size_t t, size_t d) {
    VP_REQUIRE(!used[d], "--labels: dataset label \"", dataset_labels[d], "\" matches two labels of the set");
    m.source[t] = static_cast<int32_t>(d);
    used[d] = true;
  };
  // Exact names first, then the file's synonyms, then the built-in groups.
  for (size_t t = 0; t < target.names.size(); ++t)
    for (size_t d = 0; d < dataset_labels.size() && m.source[t] < 0; ++d)
      if (!used[d] && dataset_labels[d] == target.names[t]) take(t, d);
  for (size_t t = 0; t < target.names.size(); ++t) {
    for (size_t d = 0; d < dataset_labels.size() && m.source[t] < 0; ++d) {
      if (used[d]) continue;
      const auto synonym = target.synonyms.find(dataset_labels[d]);
      if (synonym != target.synonyms.end() && synonym->second == target.names[t]) take(t, d);
    }
  }
  for (size_t t = 0; t < target.names.size(); ++t)
    for (size_t d = 0; d < dataset_labels.size() && m.source[t] < 0; ++d)
      if (!used[d] && key_of(dataset_labels[d]) == key_of(target.names[t])) take(t, d);
  for (size_t t = 0; t < target.names.size(); ++t) {
    if (m.source[t] >= 0) {
      m.mapped.emplace_back(target.names[t], dataset_labels[static_cast<size_t>(m.source[t])]);
    } else {
      m.unmapped.push_back(target.names[t]);
    }
  }
  for (size_t d = 0; d < dataset_labels.size(); ++d)
    if (!used[d]) m.unused.push_back(dataset_labels[d]);
  return m;
}

nlohmann::json label_mapping_json(const LabelMapping& mapping) {
  nlohmann::json mapped = nlohmann::json::object();
  for (const auto& [target, source] : mapping.mapped) mapped[target] = source;
  return {{"mapped", mapped}, {"unmapped", mapping.unmapped}, {"unused", mapping.unused}};
}

void apply_label_mapping(Dataset& dataset, const LabelMapping& mapping) {
  dataset.remap_labels(mapping.names, mapping.source);
}

}  // namespace vitpipe
