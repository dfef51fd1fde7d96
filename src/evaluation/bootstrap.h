// The bootstrap behind every interval vitpipe prints: which rows (or clusters of rows: patients) a resample draws,
// and numpy's percentile for the interval's ends. Resample b draws from Rng({seed, b}), so results do not depend on
// the thread count or on which metric is resampled.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace vitpipe {

struct ConfidenceInterval {
  double low = 0.0;
  double high = 0.0;
  int64_t resamples = 0;  // bootstrap resamples where the statistic was defined
  int64_t skipped = 0;    // resamples where it was not (a finding with one class only): left out, counted
  std::string unit;       // what was resampled: "patient" or "image"
};

struct BootstrapOptions {
  // A constructor rather than an aggregate, so BootstrapOptions{resamples, confidence, seed} leaves the unit fields
  // at their defaults without a missing-initializer warning.
  explicit BootstrapOptions(int64_t resamples_ = 1000, double confidence_ = 0.95, uint64_t seed_ = 0)
      : resamples(resamples_), confidence(confidence_), seed(seed_) {}
  int64_t resamples = 1000;
  double confidence = 0.95;  // percentile interval [(1-c)/2, (1+c)/2]
  uint64_t seed = 0;
  // The unit resampled (a cluster bootstrap): each row's cluster, numbered 0..C-1 in order of first appearance
  // (bootstrap_unit.h makes them from patient ids). A resample draws C clusters with replacement and takes every
  // row of each drawn cluster. Empty: each row is its own cluster, i.e. images are resampled.
  std::vector<uint32_t> cluster_of_row;
  std::string unit = "image";  // named with each interval
};

// The clusters drawn in resample `index`: `clusters` draws with replacement from Rng({seed, index}), in draw order.
std::vector<uint32_t> bootstrap_draws(int64_t clusters, uint64_t seed, int64_t index);
// How often each of `rows` rows is drawn in resample `index` (the draws above with one row per cluster).
std::vector<uint32_t> bootstrap_counts(int64_t rows, uint64_t seed, int64_t index);
// The same for a cluster bootstrap: row r counts as often as its cluster was drawn. With every row its own cluster
// numbered in row order, equal to bootstrap_counts (so image-level results do not change).
std::vector<uint32_t> cluster_bootstrap_counts(std::span<const uint32_t> cluster_of_row, int64_t clusters,
                                               uint64_t seed, int64_t index);

// numpy.percentile(values, q) with the default 'linear' method, bit for bit; `values` need not be sorted.
double percentile(std::vector<double> values, double q);

}  // namespace vitpipe
