// The 14 observations of the CheXpert labeler (Irvin et al. 2019), in the column order of CheXpert's train.csv:
// the labels of chexpert:ROOT and mimic-cxr-jpg:ROOT (whose label files use the same names).
#pragma once

#include <string>
#include <vector>

namespace vitpipe {

const std::vector<std::string>& chexpert_observations();

}  // namespace vitpipe
