#include "evaluation/bootstrap_unit.h"

#include <algorithm>
#include <unordered_map>

#include "util/error.h"

namespace vitpipe {

BootstrapUnit parse_bootstrap_unit(std::string_view text, const std::string& flag) {
  if (text == "patient") return BootstrapUnit::patient;
  if (text == "image") return BootstrapUnit::image;
  if (text == "auto") return BootstrapUnit::automatic;
  fail(flag, ": expected patient, image or auto, got '", std::string(text), "'");
}

bool has_patient_ids(const std::vector<std::string>& patients) {
  return std::any_of(patients.begin(), patients.end(), [](const std::string& p) { return !p.empty(); });
}

void set_bootstrap_unit(BootstrapOptions& options, BootstrapUnit unit, const std::vector<std::string>& patients,
                        const std::string& data) {
  const bool known = has_patient_ids(patients);
  VP_REQUIRE(unit != BootstrapUnit::patient || known, "--bootstrap-unit patient: ", data,
             " has no patient ids (use --bootstrap-unit image)");
  options.cluster_of_row.clear();
  if (unit == BootstrapUnit::image || !known) {
    options.unit = "image";
    return;
  }
  options.unit = "patient";
  options.cluster_of_row.resize(patients.size());
  std::unordered_map<std::string, uint32_t> index;
  uint32_t next = 0;
  for (size_t r = 0; r < patients.size(); ++r) {
    // An image without a patient id is its own cluster (its name cannot collide: it gets no map entry).
    if (patients[r].empty()) {
      options.cluster_of_row[r] = next++;
      continue;
    }
    const auto [it, inserted] = index.emplace(patients[r], next);
    if (inserted) ++next;
    options.cluster_of_row[r] = it->second;
  }
}

}  // namespace vitpipe
