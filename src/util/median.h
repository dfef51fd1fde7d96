#pragma once

#include <algorithm>
#include <vector>

namespace vitpipe {

// The upper median (the middle element of an odd count, the higher middle of an even one): the statistic the
// planner's profile keeps and the trainer reports of measured steps, so the two compare like with like.
inline double median_of(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

}  // namespace vitpipe
