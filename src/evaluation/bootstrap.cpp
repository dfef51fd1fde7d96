#include "evaluation/bootstrap.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"
#include "util/random.h"

namespace vitpipe {

std::vector<uint32_t> bootstrap_draws(int64_t clusters, uint64_t seed, int64_t index) {
  std::vector<uint32_t> draws(static_cast<size_t>(clusters));
  Rng rng({seed, static_cast<uint64_t>(index)});
  for (uint32_t& d : draws) d = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(clusters)));
  return draws;
}

std::vector<uint32_t> bootstrap_counts(int64_t rows, uint64_t seed, int64_t index) {
  std::vector<uint32_t> counts(static_cast<size_t>(rows), 0u);
  Rng rng({seed, static_cast<uint64_t>(index)});
  for (int64_t i = 0; i < rows; ++i) ++counts[rng.below(static_cast<uint64_t>(rows))];
  return counts;
}

std::vector<uint32_t> cluster_bootstrap_counts(std::span<const uint32_t> cluster_of_row, int64_t clusters,
                                               uint64_t seed, int64_t index) {
  // The same draws as bootstrap_counts when each row is its own cluster, so image-level intervals are unchanged.
  const std::vector<uint32_t> drawn = bootstrap_counts(clusters, seed, index);
  std::vector<uint32_t> counts(cluster_of_row.size());
  for (size_t r = 0; r < cluster_of_row.size(); ++r) counts[r] = drawn[cluster_of_row[r]];
  return counts;
}

double percentile(std::vector<double> values, double q) {
  VP_REQUIRE(!values.empty(), "percentile of an empty set");
  VP_REQUIRE(q >= 0.0 && q <= 100.0, "percentile: q must be in [0, 100] (got ", q, ")");
  std::sort(values.begin(), values.end());
  const int64_t n = static_cast<int64_t>(values.size());
  const double index = static_cast<double>(n - 1) * (q / 100.0);
  const double previous = std::floor(index);
  const int64_t lo = std::min(static_cast<int64_t>(previous), n - 1);
  const int64_t hi = std::min(lo + 1, n - 1);
  const double gamma = index - previous;
  const double a = values[static_cast<size_t>(lo)], b = values[static_cast<size_t>(hi)];
  const double diff = b - a;
  // numpy's _lerp: interpolate from the nearer end.
  return gamma >= 0.5 ? b - diff * (1.0 - gamma) : a + diff * gamma;
}

}  // namespace vitpipe
