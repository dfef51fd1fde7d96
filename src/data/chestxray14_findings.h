// The 14 ChestX-ray14 findings, verbatim and in alphabetical order: the label order of every model vitpipe trains.
#pragma once

#include <string>
#include <vector>

namespace vitpipe {

const std::vector<std::string>& chestxray14_findings();
inline constexpr const char* kNoFindingLabel = "No Finding";

}  // namespace vitpipe
