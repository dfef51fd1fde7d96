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
  return sum_of_squares(host_backend(), grads, begin, end);
}

void scale(FlatParameters& grads, double factor, int64_t begin, int64_t end) {
  scale(host_backend(), grads, factor, begin, end);
}

double sum_of_squares(Backend& backend, const FlatParameters& grads, int64_t begin, int64_t end) {
  VP_REQUIRE(grads.begin() <= begin && begin <= end && end <= grads.begin() + grads.numel(), "sum_of_squares: [", begin,
             ", ", end, ") is outside the gradients' range");
  // Fixed chunks on the whole model's offset grid: the sum does not depend on the pipeline split.
  const std::vector<int64_t> bounds = update_chunk_bounds(begin, end - begin);
  if (end == begin) return 0.0;
  return backend.sum_of_squares(grads.flat().slice(begin - grads.begin(), end - grads.begin()), bounds);
}

void scale(Backend& backend, const FlatParameters& grads, double factor, int64_t begin, int64_t end) {
  VP_REQUIRE(grads.begin() <= begin && begin <= end && end <= grads.begin() + grads.numel(), "scale: [", begin, ", ",
             end, ") is outside the gradients' range");
  if (end == begin) return;
  const Tensor g = grads.flat().slice(begin - grads.begin(), end - grads.begin());
  backend.scale(g, factor, g);
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
