#include "train/grad_clip.h"

#include <cmath>
#include <vector>

#include "train/optimizer_plan.h"
#include "util/error.h"

namespace vitpipe {

double sum_of_squares(const FlatParameters& grads) {
  return sum_of_squares(grads, grads.begin(), grads.begin() + grads.numel());
}

void scale(FlatParameters& grads, double factor) { scale(grads, factor, grads.begin(), grads.begin() + grads.numel()); }

double sum_of_squares(const FlatParameters& grads, int64_t begin, int64_t end) {
  VP_REQUIRE(grads.begin() <= begin && begin <= end && end <= grads.begin() + grads.numel(), "sum_of_squares: [", begin,
             ", ", end, ") is outside the gradients' range");
  const std::vector<int64_t> bounds = update_chunk_bounds(begin, end - begin);
  const int64_t chunks = static_cast<int64_t>(bounds.size()) - 1;
  std::vector<double> partial(static_cast<size_t>(std::max<int64_t>(chunks, 0)), 0.0);
  const float* g = grads.at(begin);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    partial[static_cast<size_t>(c)] = sum_of_squares_lanes(g + bounds[c], bounds[c + 1] - bounds[c]);
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

void scale(FlatParameters& grads, double factor, int64_t begin, int64_t end) {
  VP_REQUIRE(grads.begin() <= begin && begin <= end && end <= grads.begin() + grads.numel(), "scale: [", begin, ", ",
             end, ") is outside the gradients' range");
  const std::vector<int64_t> bounds = update_chunk_bounds(begin, end - begin);
  const int64_t chunks = static_cast<int64_t>(bounds.size()) - 1;
  const float f = static_cast<float>(factor);
  float* g = grads.at(begin);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    float* __restrict x = g + bounds[c];
    const int64_t n = bounds[c + 1] - bounds[c];
    for (int64_t i = 0; i < n; ++i) x[i] *= f;
  }
}

double clip_factor(double total_norm, double max_norm) {
  VP_REQUIRE(max_norm > 0.0, "gradient clipping: max norm must be > 0 (got ", max_norm, ")");
  if (!std::isfinite(total_norm)) return 1.0;
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

double clip_grad_norm(FlatParameters& grads, double max_norm) {
  const double norm = std::sqrt(sum_of_squares(grads));
  const double factor = clip_factor(norm, max_norm);
  if (factor < 1.0) scale(grads, factor);
  return norm;
}

}  // namespace vitpipe
