// The report's subgroup section: per finding a forest plot (each subgroup's ROC-AUC with its interval, the whole
// split's beside it), the largest gap per finding first, and each subgroup's underdiagnosis rate at the val
// thresholds. Self-contained SVG like the report's other charts.
#pragma once

#include <string>

#include "evaluation/subgroups.h"

namespace vitpipe {

// "" when the analysis has no subgroup (the predictions carry no sex, age or view).
std::string subgroup_section(const std::string& split, const SubgroupAnalysis& analysis);

}  // namespace vitpipe
