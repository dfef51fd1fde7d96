// The per-label cells of CheXpert-style label files (CheXpert, MIMIC-CXR-JPG, csv: with one column per label):
// 1 positive, 0 negative, -1 uncertain, blank (or NaN, as pandas writes a blank) not mentioned. What uncertain and
// blank mean is decided later, by --uncertain and --blank (apply_dataset_options in data/dataset.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "data/dataset.h"

namespace vitpipe {

enum class LabelCode { positive, negative, uncertain, blank, invalid };

// "1", "1.0", "0", "0.0", "-1", "-1.0", "" and "nan" (any case); anything else is invalid.
LabelCode parse_label_code(std::string_view cell);

// Records label `label` of `item` as the code says (positive -> labels, uncertain -> uncertain, blank ->
// unmentioned; negative: nothing).
void add_label_code(LabelCode code, int32_t label, DatasetItem& item);

inline constexpr const char* kLabelCodesExpected = "1.0, 0.0, -1.0 (uncertain) or blank (not mentioned)";

}  // namespace vitpipe
