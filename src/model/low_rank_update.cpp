#include "model/low_rank_update.h"

#include "util/error.h"

namespace vitpipe {

void add_low_rank_update(const Tensor& weight, const Tensor& a, const Tensor& b, double scale) {
  VP_REQUIRE(weight.rank() == 2 && a.rank() == 2 && b.rank() == 2 && a.dim(1) == weight.dim(1) &&
                 b.dim(0) == weight.dim(0) && b.dim(1) == a.dim(0),
             "internal: a low-rank update ", shape_string(b.shape()), " x ", shape_string(a.shape()), " for weight ",
             shape_string(weight.shape()));
  const int64_t out = weight.dim(0), in = weight.dim(1), r = a.dim(0);
  const float* af = a.f32();
  const float* bf = b.f32();
  float* w = weight.f32();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < out; ++i) {
    for (int64_t j = 0; j < in; ++j) {
      double delta = 0.0;
      for (int64_t k = 0; k < r; ++k) delta += static_cast<double>(bf[i * r + k]) * static_cast<double>(af[k * in + j]);
      w[i * in + j] = static_cast<float>(static_cast<double>(w[i * in + j]) + scale * delta);
    }
  }
}

}  // namespace vitpipe
