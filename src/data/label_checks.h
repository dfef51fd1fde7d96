// Label sets that cannot train. Refusals that can name a source's own rows (a CSV column, class folders) are made
// where the source is read; these look at any dataset once its splits are assigned.
#pragma once

#include <string>
#include <vector>

#include "data/dataset.h"

namespace vitpipe {

// Throws when a single-label dataset has fewer than two classes (cross-entropy over one class learns nothing).
// Returns one warning per label without a positive or without a negative image in `split` (multi-label), or per
// class without an image in `split` (single-label): such a label cannot be learned and its ROC-AUC is undefined.
std::vector<std::string> check_trainable_labels(const Dataset& dataset, Split split);

}  // namespace vitpipe
