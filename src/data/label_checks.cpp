#include "data/label_checks.h"

#include "util/error.h"

namespace vitpipe {

std::vector<std::string> check_trainable_labels(const Dataset& dataset, Split split) {
  const int64_t labels = dataset.num_labels();
  VP_REQUIRE(dataset.multi_label() || labels >= 2, dataset.spec(), ": a single-label data set with ", labels,
             labels == 1 ? concat(" class (\"", dataset.label_names().front(), "\")") : std::string(" classes"),
             ": a single-label task needs at least two classes");
  const std::vector<int64_t> items = dataset.split_indices(split);
  // A masked (unknown) label is neither a positive nor a negative of that label.
  std::vector<int64_t> positives(static_cast<size_t>(labels), 0), known(static_cast<size_t>(labels), 0);
  for (int64_t i : items) {
    const DatasetItem& item = dataset.item(i);
    for (int32_t label : item.labels) ++positives[static_cast<size_t>(label)];
    for (int64_t k = 0; k < labels; ++k) ++known[static_cast<size_t>(k)];
    for (int32_t label : item.masked) --known[static_cast<size_t>(label)];
  }
  std::vector<std::string> warnings;
  for (int64_t k = 0; k < labels; ++k) {
    const int64_t p = positives[static_cast<size_t>(k)];
    const int64_t n = known[static_cast<size_t>(k)];
    const std::string& name = dataset.label_names()[static_cast<size_t>(k)];
    if (!dataset.multi_label()) {
      if (p == 0)
        warnings.push_back(concat(dataset.spec(), ": class \"", name, "\" has no image in the ", split_name(split),
                                  " split (", n, " images): it cannot be learned"));
    } else if (p == 0 || p == n) {
      warnings.push_back(concat(dataset.spec(), ": label \"", name, "\" has ", p == 0 ? "no positive" : "no negative",
                                " image in the ", split_name(split), " split (", p, " of ", n,
                                " images positive): it cannot be learned and its ROC-AUC is undefined"));
    }
  }
  return warnings;
}

}  // namespace vitpipe
