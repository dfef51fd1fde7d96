#include "model/position_interpolation.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "util/error.h"

namespace vitpipe {
namespace {

constexpr double kCubicA = -0.75;

// torch's cubic_convolution1 (|x| <= 1) and cubic_convolution2 (1 < |x| < 2).
double cubic_near(double x) { return ((kCubicA + 2) * x - (kCubicA + 3)) * x * x + 1; }
double cubic_far(double x) { return ((kCubicA * x - 5 * kCubicA) * x + 8 * kCubicA) * x - 4 * kCubicA; }

struct Taps {
  int64_t index[4];
  double weight[4];
};

// For each output position: the four clamped source indices and their weights (torch's HelperInterpCubic).
std::vector<Taps> cubic_taps(int64_t in_size, int64_t out_size) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  std::vector<Taps> taps(static_cast<size_t>(out_size));
  for (int64_t o = 0; o < out_size; ++o) {
    const double real = scale * (static_cast<double>(o) + 0.5) - 0.5;  // half-pixel centres, no clamp (cubic)
    int64_t base = std::min(static_cast<int64_t>(std::floor(real)), in_size - 1);
    double t = std::min(std::max(real - static_cast<double>(base), 0.0), 1.0);
    Taps& tap = taps[static_cast<size_t>(o)];
    tap.weight[0] = cubic_far(t + 1.0);
    tap.weight[1] = cubic_near(t);
    const double opposite = 1.0 - t;
    tap.weight[2] = cubic_near(opposite);
    tap.weight[3] = cubic_far(opposite + 1.0);
    for (int k = 0; k < 4; ++k) {
      tap.index[k] = std::min(std::max(base - 1 + k, int64_t{0}), in_size - 1);
    }
  }
  return taps;
}

// torch's antialiasing filter for bicubic (A = -0.5, as Pillow's).
double keys_cubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

}  // namespace

std::vector<double> bicubic_weight_matrix(int64_t in_size, int64_t out_size, bool antialias) {
  VP_REQUIRE(in_size > 0 && out_size > 0, "bicubic weights: bad sizes ", in_size, " -> ", out_size);
  std::vector<double> w(static_cast<size_t>(out_size * in_size), 0.0);
  if (!antialias) {
    const std::vector<Taps> taps = cubic_taps(in_size, out_size);
    for (int64_t o = 0; o < out_size; ++o) {
      for (int k = 0; k < 4; ++k) {
        const Taps& t = taps[static_cast<size_t>(o)];
        w[static_cast<size_t>(o * in_size + t.index[k])] += t.weight[k];
      }
    }
    return w;
  }
  // torch's _upsample_bicubic2d_aa (HelperInterpBase::_compute_indices_min_size_weights_aa): Pillow's rule, the
  // support grows with the downscale factor, weights normalised to sum 1 over the taps inside the input.
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  for (int64_t o = 0; o < out_size; ++o) {
    const double center = scale * (static_cast<double>(o) + 0.5);
    const int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    const int64_t xmax = std::min(static_cast<int64_t>(center + support + 0.5), in_size);
    double total = 0.0;
    for (int64_t j = xmin; j < xmax; ++j) total += keys_cubic((static_cast<double>(j) - center + 0.5) * invscale);
    for (int64_t j = xmin; j < xmax; ++j) {
      const double v = keys_cubic((static_cast<double>(j) - center + 0.5) * invscale);
      w[static_cast<size_t>(o * in_size + j)] = total != 0.0 ? v / total : 0.0;
    }
  }
  return w;
}

void bicubic_resize(const float* src, int64_t channels, int64_t in_h, int64_t in_w, float* dst, int64_t out_h,
                    int64_t out_w) {
  VP_REQUIRE(channels >= 0 && in_h > 0 && in_w > 0 && out_h > 0 && out_w > 0, "bicubic_resize: bad sizes ", in_h, "x",
             in_w, " -> ", out_h, "x", out_w);
  const std::vector<Taps> rows = cubic_taps(in_h, out_h);
  const std::vector<Taps> cols = cubic_taps(in_w, out_w);
#pragma omp parallel for schedule(static) if (channels * out_h * out_w > (1 << 16))
  for (int64_t c = 0; c < channels; ++c) {
    const float* plane = src + c * in_h * in_w;
    float* out = dst + c * out_h * out_w;
    for (int64_t y = 0; y < out_h; ++y) {
      const Taps& row = rows[static_cast<size_t>(y)];
      for (int64_t x = 0; x < out_w; ++x) {
        const Taps& col = cols[static_cast<size_t>(x)];
        // As torch: the width taps inside, the height taps outside; in double, rounded once at the end.
        double total = 0.0;
        for (int i = 0; i < 4; ++i) {
          const float* line = plane + row.index[i] * in_w;
          double inner = 0.0;
          for (int j = 0; j < 4; ++j) inner += static_cast<double>(line[col.index[j]]) * col.weight[j];
          total += inner * row.weight[i];
        }
        out[y * out_w + x] = static_cast<float>(total);
      }
    }
  }
}

Tensor interpolate_position_embeddings(const Tensor& position_embeddings, int64_t new_h, int64_t new_w, int64_t kept) {
  const Shape& shape = position_embeddings.shape();
  VP_REQUIRE(shape.size() == 3 && shape[0] == 1 && kept >= 1 && shape[1] >= kept + 1,
             "position embeddings must be [1, ", kept, " + grid, D], got ", shape_string(shape));
  const int64_t positions = shape[1] - kept;
  const int64_t dim = shape[2];
  const int64_t old_side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(positions))));
  VP_REQUIRE(old_side * old_side == positions, "position embeddings hold ", positions,
             " patch positions, not a square grid");
  VP_REQUIRE(new_h > 0 && new_w > 0, "position embeddings: new grid ", new_h, "x", new_w, " must be positive");
  const float* source = position_embeddings.f32();

  Tensor result = Tensor::empty({1, kept + new_h * new_w, dim});
  float* out = result.f32();
  for (int64_t d = 0; d < kept * dim; ++d) out[d] = source[d];  // CLS (and DeiT's distillation token) kept

  // [grid, D] -> D planes of the grid, resize, back to [grid', D].
  std::vector<float> planes(static_cast<size_t>(dim * positions));
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t d = 0; d < dim; ++d) planes[static_cast<size_t>(d * positions + p)] = source[(kept + p) * dim + d];
  }
  std::vector<float> resized(static_cast<size_t>(dim * new_h * new_w));
  bicubic_resize(planes.data(), dim, old_side, old_side, resized.data(), new_h, new_w);
  const int64_t new_positions = new_h * new_w;
  for (int64_t p = 0; p < new_positions; ++p) {
    for (int64_t d = 0; d < dim; ++d) out[(kept + p) * dim + d] = resized[static_cast<size_t>(d * new_positions + p)];
  }
  return result;
}

}  // namespace vitpipe
