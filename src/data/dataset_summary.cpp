#include "data/dataset_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "data/chestxray14_findings.h"

namespace vitpipe {

using nlohmann::json;

json summarize_dataset(const Dataset& dataset) {
  const Split splits[] = {Split::train, Split::val, Split::test, Split::none};
  std::map<Split, int64_t> images;
  std::map<Split, std::set<std::string>> patients;
  std::vector<int64_t> label_counts(static_cast<size_t>(dataset.num_labels()), 0);
  std::vector<int64_t> masked_counts(static_cast<size_t>(dataset.num_labels()), 0);
  int64_t unlabelled = 0;
  std::map<std::string, int64_t> views;
  for (int64_t i = 0; i < dataset.size(); ++i) {
    const DatasetItem& item = dataset.item(i);
    images[item.split]++;
    if (!item.patient.empty()) patients[item.split].insert(item.patient);
    for (int32_t l : item.labels) label_counts[static_cast<size_t>(l)]++;
    for (int32_t l : item.masked) masked_counts[static_cast<size_t>(l)]++;
    if (item.labels.empty()) unlabelled++;
    if (!item.view.empty()) views[item.view]++;
  }
  json out;
  out["spec"] = dataset.spec();
  out["kind"] = dataset.kind();
  out["total"] = dataset.size();
  out["missing"] = dataset.missing().size();
  json split_counts = json::object();
  for (Split s : splits)
    if (s != Split::none || images[s] > 0) split_counts[split_name(s)] = images[s];
  out["splits"] = split_counts;
  json counts = json::object();
  for (size_t l = 0; l < label_counts.size(); ++l) counts[dataset.label_names()[l]] = label_counts[l];
  const auto& names = dataset.label_names();
  if (dataset.multi_label() && std::find(names.begin(), names.end(), kNoFindingLabel) == names.end())
    counts[kNoFindingLabel] = unlabelled;
  out["label_counts"] = counts;
  if (dataset.has_masked_labels()) {
    json masked = json::object();
    for (size_t l = 0; l < masked_counts.size(); ++l) masked[dataset.label_names()[l]] = masked_counts[l];
    out["masked_counts"] = masked;  // unknown (uncertain or blank under the policies): out of loss and metrics
  }
  out["labels"] = names;
  out["multi_label"] = dataset.multi_label();
  bool has_patients = std::any_of(patients.begin(), patients.end(), [](const auto& p) { return !p.second.empty(); });
  if (has_patients) {
    json per_split = json::object();
    std::map<std::string, int> splits_of_patient;
    for (Split s : splits) {
      if (s != Split::none || !patients[s].empty()) per_split[split_name(s)] = patients[s].size();
      for (const auto& p : patients[s]) splits_of_patient[p]++;
    }
    out["patients"] = per_split;
    out["patients_in_two_splits"] =
        std::count_if(splits_of_patient.begin(), splits_of_patient.end(), [](const auto& p) { return p.second > 1; });
  }
  if (!views.empty()) out["views"] = views;
  json examples = json::array();
  for (size_t i = 0; i < std::min<size_t>(10, dataset.missing().size()); ++i) examples.push_back(dataset.missing()[i]);
  out["missing_examples"] = examples;
  if (dataset.stored_image_size() > 0) out["cache_image_size"] = dataset.stored_image_size();
  return out;
}

std::string format_dataset_summary(const json& s) {
  std::string out;
  char line[256];
  auto add = [&](const std::string& text) { out += text + "\n"; };
  add("dataset  " + s.at("spec").get<std::string>());
  std::snprintf(line, sizeof(line), "images   %lld found, %lld missing",
                static_cast<long long>(s.at("total").get<int64_t>()),
                static_cast<long long>(s.at("missing").get<int64_t>()));
  add(line);
  add("");
  std::snprintf(line, sizeof(line), "%-8s %10s %10s", "split", "images", "patients");
  add(line);
  for (const auto& [name, count] : s.at("splits").items()) {
    std::string patients = "-";
    if (s.contains("patients") && s["patients"].contains(name))
      patients = std::to_string(s["patients"][name].get<int64_t>());
    std::snprintf(line, sizeof(line), "%-8s %10lld %10s", name.c_str(), static_cast<long long>(count.get<int64_t>()),
                  patients.c_str());
    add(line);
  }
  if (s.contains("patients_in_two_splits"))
    add("patients in two splits: " + std::to_string(s["patients_in_two_splits"].get<int64_t>()));
  add("");
  const double total = std::max<double>(1.0, static_cast<double>(s.at("total").get<int64_t>()));
  const bool masked = s.contains("masked_counts");
  std::snprintf(line, sizeof(line), "%-20s %10s %8s%s", "label", "images", "share", masked ? "     masked" : "");
  add(line);
  for (const auto& [name, count] : s.at("label_counts").items()) {
    char unknown[32] = "";
    if (masked && s["masked_counts"].contains(name))
      std::snprintf(unknown, sizeof(unknown), " %10lld",
                    static_cast<long long>(s["masked_counts"][name].get<int64_t>()));
    std::snprintf(line, sizeof(line), "%-20s %10lld %7.2f%%%s", name.c_str(),
                  static_cast<long long>(count.get<int64_t>()),
                  100.0 * static_cast<double>(count.get<int64_t>()) / total, unknown);
    add(line);
  }
  if (s.contains("views")) {
    add("");
    for (const auto& [name, count] : s["views"].items()) {
      std::snprintf(line, sizeof(line), "view %-15s %10lld", name.c_str(),
                    static_cast<long long>(count.get<int64_t>()));
      add(line);
    }
  }
  if (!s.at("missing_examples").empty()) {
    std::string examples;
    for (const auto& m : s["missing_examples"]) examples += (examples.empty() ? "" : ", ") + m.get<std::string>();
    add("");
    add("missing (first " + std::to_string(s["missing_examples"].size()) + "): " + examples);
  }
  return out;
}

}  // namespace vitpipe
