#include "data/dataset.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "data/chestxray14_findings.h"
#include "util/error.h"
#include "util/log.h"
#include "util/random.h"

namespace vitpipe {
namespace {

constexpr uint64_t kValidationSplitStream = 0x76616c73706c6974ull;  // "valsplit"

}  // namespace

const char* split_name(Split split) {
  switch (split) {
    case Split::train:
      return "train";
    case Split::val:
      return "val";
    case Split::test:
      return "test";
    case Split::none:
      return "none";
  }
  return "none";
}

Split parse_split(std::string_view name, const std::string& where) {
  std::string lower(name);
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "train" || lower == "training") return Split::train;
  if (lower == "val" || lower == "valid" || lower == "validation") return Split::val;
  if (lower == "test" || lower == "testing") return Split::test;
  fail(where, ": unknown split \"", name, "\" (expected train, val or test)");
}

std::vector<int64_t> Dataset::split_indices(Split split) const {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < size(); ++i)
    if (item(i).split == split) out.push_back(i);
  return out;
}

const char* uncertain_policy_name(UncertainPolicy policy) {
  switch (policy) {
    case UncertainPolicy::ones:
      return "ones";
    case UncertainPolicy::zeros:
      return "zeros";
    case UncertainPolicy::ignore:
      return "ignore";
  }
  return "ignore";
}

const char* blank_policy_name(BlankPolicy policy) { return policy == BlankPolicy::zeros ? "zeros" : "ignore"; }

const char* label_vote_name(LabelVote vote) { return vote == LabelVote::any ? "any" : "majority"; }

bool view_matches(const std::string& wanted, const std::string& view) {
  auto upper = [](std::string s) {
    for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string w = upper(wanted), v = upper(view);
  if (w == v) return true;
  if (w == "FRONTAL") return v.rfind("PA", 0) == 0 || v.rfind("AP", 0) == 0 || v == "FRONTAL";
  if (w == "LATERAL") return v == "LATERAL" || v == "LL" || v == "RL" || v == "L";
  return false;
}

void Dataset::write_labels(int64_t i, float* row) const {
  std::fill(row, row + num_labels(), 0.0f);
  for (int32_t label : item(i).labels) row[label] = 1.0f;
}

void Dataset::write_label_weights(int64_t i, float* row) const {
  std::fill(row, row + num_labels(), 1.0f);
  for (int32_t label : item(i).masked) row[label] = 0.0f;
}

bool Dataset::has_masked_labels() const {
  return std::any_of(items_.begin(), items_.end(), [](const DatasetItem& item) { return !item.masked.empty(); });
}

void Dataset::remap_labels(const std::vector<std::string>& names, const std::vector<int32_t>& source) {
  VP_REQUIRE(multi_label_, spec_, ": --labels maps the labels of multi-label datasets only");
  VP_REQUIRE(names.size() == source.size(), "remap_labels: ", names.size(), " names for ", source.size(), " sources");
  std::vector<int32_t> target_of(label_names_.size(), -1);
  std::vector<int32_t> unmapped;
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] < 0) {
      unmapped.push_back(static_cast<int32_t>(k));
    } else {
      VP_REQUIRE(source[k] < static_cast<int32_t>(label_names_.size()), "remap_labels: source label out of range");
      target_of[static_cast<size_t>(source[k])] = static_cast<int32_t>(k);
    }
  }
  auto remap = [&](const std::vector<int32_t>& old) {
    std::vector<int32_t> out;
    for (int32_t l : old)
      if (target_of[static_cast<size_t>(l)] >= 0) out.push_back(target_of[static_cast<size_t>(l)]);
    std::sort(out.begin(), out.end());
    return out;
  };
  for (DatasetItem& item : items_) {
    item.labels = remap(item.labels);
    item.uncertain = remap(item.uncertain);
    item.unmentioned = remap(item.unmentioned);
    std::vector<int32_t> masked = remap(item.masked);
    masked.insert(masked.end(), unmapped.begin(), unmapped.end());
    std::sort(masked.begin(), masked.end());
    item.masked = std::move(masked);
  }
  label_names_ = names;
}

int64_t Dataset::class_index(int64_t i) const {
  if (multi_label_) return -1;
  return item(i).labels.at(0);
}

std::vector<uint8_t> choose_validation_items(const std::vector<std::string>& patient_keys, double val_fraction,
                                             uint64_t seed) {
  VP_REQUIRE(val_fraction >= 0.0 && val_fraction < 1.0, "--val-fraction ", val_fraction,
             " is out of range (expected 0 <= fraction < 1)");
  std::map<std::string, std::vector<size_t>> by_patient;  // sorted keys: independent of input order
  for (size_t i = 0; i < patient_keys.size(); ++i) by_patient[patient_keys[i]].push_back(i);
  std::vector<const std::vector<size_t>*> patients;
  patients.reserve(by_patient.size());
  for (const auto& [key, members] : by_patient) patients.push_back(&members);
  Rng rng({seed, kValidationSplitStream});
  for (size_t i = patients.size(); i > 1; --i) std::swap(patients[i - 1], patients[rng.below(i)]);

  const auto target = static_cast<size_t>(std::llround(val_fraction * static_cast<double>(patient_keys.size())));
  std::vector<uint8_t> is_val(patient_keys.size(), 0);
  size_t taken = 0;
  for (const auto* members : patients) {
    if (taken >= target) break;
    for (size_t i : *members) is_val[i] = 1;
    taken += members->size();
  }
  return is_val;
}

// Images without a patient ID are divided one by one: a patient's images can land in train and val both, and the
// validation scores flatter the model. Said once (rank 0), with what to do.
void warn_images_without_patients(const std::vector<std::string>& keys, double val_fraction,
                                  const std::string& source) {
  const auto unknown = std::count_if(keys.begin(), keys.end(), [](const std::string& k) { return k[0] == '\x01'; });
  if (unknown == 0 || val_fraction <= 0 || !log_enabled()) return;
  const bool folder = source.starts_with("folder:");
  warn(source, ": ", unknown, " of ", keys.size(),
       " images have no patient ID, so train and val are divided by image and one patient's images may be in both "
       "(patient leakage: optimistic validation scores); for a patient-disjoint division ",
       folder ? "use a csv: dataset with a patient column, or train/ val/ test/ subfolders"
              : "add a patient column (patient, patient_id, Patient ID, subject or subject_id)");
}

std::vector<size_t> apply_dataset_options(std::vector<SourceEntry>& entries, std::vector<std::string>& label_names,
                                          bool no_finding_allowed, const DatasetOptions& options,
                                          const std::string& source_for_errors) {
  // The division sees every train_val entry, whatever the view filter: filtering never moves a patient.
  std::vector<size_t> pool;
  std::vector<std::string> keys;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].source_split != SourceSplit::train_val) continue;
    pool.push_back(i);
    const DatasetItem& item = entries[i].item;
    keys.push_back(item.patient.empty() ? "\x01" + item.name : item.patient);
  }
  warn_images_without_patients(keys, options.val_fraction, source_for_errors);
  std::vector<uint8_t> is_val = choose_validation_items(keys, options.val_fraction, options.seed);
  for (size_t k = 0; k < pool.size(); ++k) entries[pool[k]].item.split = is_val[k] ? Split::val : Split::train;
  for (auto& entry : entries) {
    switch (entry.source_split) {
      case SourceSplit::train_val:
        break;
      case SourceSplit::train:
        entry.item.split = Split::train;
        break;
      case SourceSplit::val:
        entry.item.split = Split::val;
        break;
      case SourceSplit::test:
        entry.item.split = Split::test;
        break;
      case SourceSplit::none:
        entry.item.split = Split::none;
        break;
    }
  }

  // Uncertain (-1) and blank labels: positive, negative or masked as the policies say.
  for (auto& entry : entries) {
    DatasetItem& item = entry.item;
    std::vector<int32_t> positives = item.labels, masked;
    if (options.uncertain == UncertainPolicy::ones)
      positives.insert(positives.end(), item.uncertain.begin(), item.uncertain.end());
    if (options.uncertain == UncertainPolicy::ignore) masked = item.uncertain;
    if (options.blank == BlankPolicy::ignore)
      masked.insert(masked.end(), item.unmentioned.begin(), item.unmentioned.end());
    for (auto* list : {&positives, &masked}) {
      std::sort(list->begin(), list->end());
      list->erase(std::unique(list->begin(), list->end()), list->end());
    }
    item.labels = std::move(positives);
    item.masked = std::move(masked);
  }

  if (options.add_no_finding) {
    VP_REQUIRE(no_finding_allowed, source_for_errors,
               ": --add-no-finding needs a multi-label dataset whose empty label set means \"No Finding\"");
    VP_REQUIRE(std::find(label_names.begin(), label_names.end(), kNoFindingLabel) == label_names.end(),
               source_for_errors, ": already has a \"No Finding\" label");
    label_names.push_back(kNoFindingLabel);
    const auto no_finding = static_cast<int32_t>(label_names.size() - 1);
    for (auto& entry : entries) {
      if (!entry.item.labels.empty()) continue;
      (entry.item.masked.empty() ? entry.item.labels : entry.item.masked).push_back(no_finding);
    }
  }

  std::vector<size_t> kept;
  if (!options.view.empty()) {
    bool any_view =
        std::any_of(entries.begin(), entries.end(), [](const SourceEntry& e) { return !e.item.view.empty(); });
    VP_REQUIRE(any_view || entries.empty(), source_for_errors, ": --view ", options.view,
               " given but this dataset has no view positions");
  }
  for (size_t i = 0; i < entries.size(); ++i)
    if (options.view.empty() || view_matches(options.view, entries[i].item.view)) kept.push_back(i);
  return kept;
}

}  // namespace vitpipe
