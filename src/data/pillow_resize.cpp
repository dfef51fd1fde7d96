#include "data/pillow_resize.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "util/error.h"

namespace vitpipe {
namespace {

// Pillow: 8 bits of result, 2 bits of headroom for filters with negative lobes.
constexpr int kPrecisionBits = 32 - 8 - 2;

// ---------------------------------------------------------------------------------------------------------------
// Weight tables. Computed in double exactly as Pillow's precompute_coeffs/normalize_coeffs_8bpc do, down to the
// evaluation order. GCC contracts a * b + c into one fused multiply-add in C++ when -march=native allows it, which
// rounds differently from Pillow's separately rounded products and would move some fixed-point weights by one.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

struct FilterSpec {
  double (*weight)(double x);
  double support;
};

double box_weight(double x) { return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0; }

double bilinear_weight(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

double hamming_weight(double x) {
  x = std::fabs(x);
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x = x * M_PI;
  // Pillow writes the constants as floats: 0.54f and 0.46f, promoted to double.
  return std::sin(x) / x * (static_cast<double>(0.54f) + static_cast<double>(0.46f) * std::cos(x));
}

double bicubic_weight(double x) {
  constexpr double a = -0.5;  // Pillow's choice (Keys' cubic with a = -0.5)
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return std::sin(x) / x;
}

double lanczos_weight(double x) { return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3) : 0.0; }

FilterSpec filter_spec(ResampleFilter filter) {
  switch (filter) {
    case ResampleFilter::box:
      return {box_weight, 0.5};
    case ResampleFilter::bilinear:
      return {bilinear_weight, 1.0};
    case ResampleFilter::hamming:
      return {hamming_weight, 1.0};
    case ResampleFilter::bicubic:
      return {bicubic_weight, 2.0};
    case ResampleFilter::lanczos:
      return {lanczos_weight, 3.0};
    case ResampleFilter::nearest:
      break;
  }
  fail("resize: filter ", static_cast<int>(filter), " is not a convolution filter");
}

// For every output index: the first input index, the number of taps and the fixed-point weights.
struct ResampleTable {
  int ksize = 0;
  std::vector<int32_t> first;
  std::vector<int32_t> count;
  std::vector<int32_t> weights;  // out_size x ksize, zero past `count`
};

ResampleTable build_table(int64_t in_size, int64_t out_size, ResampleFilter filter) {
  const FilterSpec spec = filter_spec(filter);
  // Pillow passes the box (0, 0, w, h) as floats: in1 - in0 is a float subtraction.
  const float in0 = 0.0f;
  const float in1 = static_cast<float>(in_size);
  const double scale = static_cast<double>(in1 - in0) / static_cast<double>(out_size);
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = spec.support * filterscale;
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;

  ResampleTable table;
  table.ksize = ksize;
  table.first.resize(static_cast<size_t>(out_size));
  table.count.resize(static_cast<size_t>(out_size));
  table.weights.assign(static_cast<size_t>(out_size) * static_cast<size_t>(ksize), 0);
  std::vector<double> k(static_cast<size_t>(ksize));
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (static_cast<double>(xx) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);  // truncation, as Pillow's (int) cast
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = static_cast<int>(in_size);
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = spec.weight((static_cast<double>(x + xmin) - center + 0.5) * ss);
      k[static_cast<size_t>(x)] = w;
      ww += w;
    }
    int32_t* fixed = table.weights.data() + xx * ksize;
    for (int x = 0; x < xmax; ++x) {
      double w = k[static_cast<size_t>(x)];
      if (ww != 0.0) w /= ww;
      const double scaled = w * (1 << kPrecisionBits);
      fixed[x] = static_cast<int32_t>(w < 0 ? -0.5 + scaled : 0.5 + scaled);
    }
    table.first[static_cast<size_t>(xx)] = xmin;
    table.count[static_cast<size_t>(xx)] = xmax;
  }
  return table;
}

// NEAREST: Pillow's ImagingScaleAffine. The source coordinate of output pixel i is accumulated in double, starting
// from the centre of the first output pixel; -1 marks a coordinate outside the image (filled with 0).
std::vector<int32_t> nearest_indices(int64_t in_size, int64_t out_size) {
  const float in0 = 0.0f;
  const float in1 = static_cast<float>(in_size);
  const double step = static_cast<double>(in1 - in0) / static_cast<double>(out_size);
  double pos = static_cast<double>(in0) + step * 0.5;
  std::vector<int32_t> index(static_cast<size_t>(out_size));
  for (int64_t i = 0; i < out_size; ++i) {
    const int v = pos < 0.0 ? -1 : static_cast<int>(pos);
    index[static_cast<size_t>(i)] = (v >= 0 && v < in_size) ? v : -1;
    pos += step;
  }
  return index;
}

#pragma GCC pop_options
// ---------------------------------------------------------------------------------------------------------------

// Tables are cached per (input size, output size, filter): a dataset resizes 1024 -> 224 a hundred thousand times.
class TableCache {
 public:
  std::shared_ptr<const ResampleTable> get(int64_t in_size, int64_t out_size, ResampleFilter filter) {
    const auto key = std::make_tuple(in_size, out_size, static_cast<int>(filter));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = tables_.find(key);
      if (it != tables_.end()) return it->second;
    }
    auto table = std::make_shared<const ResampleTable>(build_table(in_size, out_size, filter));
    std::lock_guard<std::mutex> lock(mutex_);
    if (tables_.size() >= kMaxEntries) tables_.clear();  // many distinct sizes: start over rather than grow
    tables_.emplace(key, table);
    return table;
  }

 private:
  static constexpr size_t kMaxEntries = 4096;
  std::mutex mutex_;
  std::map<std::tuple<int64_t, int64_t, int>, std::shared_ptr<const ResampleTable>> tables_;
};

TableCache& table_cache() {
  static TableCache cache;
  return cache;
}

inline uint8_t clip8(int32_t sum) {
  const int32_t v = sum >> kPrecisionBits;  // arithmetic shift: floor, like Pillow's lookup index
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

constexpr int32_t kRoundingBias = 1 << (kPrecisionBits - 1);
constexpr size_t kKeepScratchBytes = size_t{64} << 20;  // per-thread scratch kept between calls

// Rows [row_begin, row_begin + rows) of `in` resampled along x into `out` (rows x out_width).
template <int C>
void horizontal_pass(const uint8_t* in, int64_t in_width, int64_t row_begin, int64_t rows, const ResampleTable& table,
                     int64_t out_width, uint8_t* out) {
  const int ksize = table.ksize;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = in + (row_begin + r) * in_width * C;
    uint8_t* dst = out + r * out_width * C;
    for (int64_t xx = 0; xx < out_width; ++xx) {
      const int32_t* k = table.weights.data() + xx * ksize;
      const uint8_t* window = src + static_cast<int64_t>(table.first[static_cast<size_t>(xx)]) * C;
      const int n = table.count[static_cast<size_t>(xx)];
      int32_t sum[C];
      for (int c = 0; c < C; ++c) sum[c] = kRoundingBias;
      for (int t = 0; t < n; ++t) {
        for (int c = 0; c < C; ++c) sum[c] += static_cast<int32_t>(window[t * C + c]) * k[t];
      }
      for (int c = 0; c < C; ++c) dst[xx * C + c] = clip8(sum[c]);
    }
  }
}

// `in` has rows of `row_elems` bytes, starting at input row `row_offset`; output row yy reads input rows
// first[yy] .. first[yy] + count[yy] - 1.
void vertical_pass(const uint8_t* in, int64_t row_elems, int64_t row_offset, const ResampleTable& table,
                   int64_t out_height, uint8_t* out) {
  const int ksize = table.ksize;
  std::vector<int32_t> sum(static_cast<size_t>(row_elems));
  for (int64_t yy = 0; yy < out_height; ++yy) {
    const int32_t* k = table.weights.data() + yy * ksize;
    const uint8_t* rows = in + (table.first[static_cast<size_t>(yy)] - row_offset) * row_elems;
    const int n = table.count[static_cast<size_t>(yy)];
    int32_t* s = sum.data();
    for (int64_t i = 0; i < row_elems; ++i) s[i] = kRoundingBias;
    for (int t = 0; t < n; ++t) {
      const uint8_t* row = rows + t * row_elems;
      const int32_t w = k[t];
      for (int64_t i = 0; i < row_elems; ++i) s[i] += static_cast<int32_t>(row[i]) * w;
    }
    uint8_t* dst = out + yy * row_elems;
    for (int64_t i = 0; i < row_elems; ++i) dst[i] = clip8(s[i]);
  }
}

void resize_nearest(const uint8_t* in, int64_t in_width, int64_t in_height, int channels, uint8_t* out,
                    int64_t out_width, int64_t out_height) {
  const std::vector<int32_t> xs = nearest_indices(in_width, out_width);
  const std::vector<int32_t> ys = nearest_indices(in_height, out_height);
  for (int64_t y = 0; y < out_height; ++y) {
    uint8_t* dst = out + y * out_width * channels;
    const int32_t sy = ys[static_cast<size_t>(y)];
    if (sy < 0) {
      std::fill(dst, dst + out_width * channels, uint8_t{0});
      continue;
    }
    const uint8_t* src = in + sy * in_width * channels;
    for (int64_t x = 0; x < out_width; ++x) {
      const int32_t sx = xs[static_cast<size_t>(x)];
      for (int c = 0; c < channels; ++c) dst[x * channels + c] = sx < 0 ? 0 : src[sx * channels + c];
    }
  }
}

template <int C>
void resize_convolution(const uint8_t* in, int64_t in_width, int64_t in_height, uint8_t* out, int64_t out_width,
                        int64_t out_height, ResampleFilter filter) {
  const bool need_horizontal = out_width != in_width;
  const bool need_vertical = out_height != in_height;
  if (!need_vertical) {
    horizontal_pass<C>(in, in_width, 0, in_height, *table_cache().get(in_width, out_width, filter), out_width, out);
    return;
  }
  const auto vertical = table_cache().get(in_height, out_height, filter);
  if (!need_horizontal) {
    vertical_pass(in, in_width * C, 0, *vertical, out_height, out);
    return;
  }
  // Like Pillow, resample along x only the rows the vertical pass reads, then shift its row indices to match.
  const int64_t row_first = vertical->first.front();
  const int64_t row_last = static_cast<int64_t>(vertical->first.back()) + vertical->count.back();
  const auto horizontal = table_cache().get(in_width, out_width, filter);
  thread_local std::vector<uint8_t> temp;
  temp.resize(static_cast<size_t>((row_last - row_first) * out_width * C));
  horizontal_pass<C>(in, in_width, row_first, row_last - row_first, *horizontal, out_width, temp.data());
  vertical_pass(temp.data(), out_width * C, row_first, *vertical, out_height, out);
  if (temp.capacity() > kKeepScratchBytes) std::vector<uint8_t>().swap(temp);  // one huge image: give it back
}

}  // namespace

ResampleFilter resample_filter_from_pil(int pil_id) {
  VP_REQUIRE(pil_id >= 0 && pil_id <= 5, "resample filter ", pil_id,
             " is not a PIL filter (0 nearest, 1 lanczos, 2 bilinear, 3 bicubic, 4 box, 5 hamming)");
  return static_cast<ResampleFilter>(pil_id);
}

std::string resample_filter_name(ResampleFilter filter) {
  switch (filter) {
    case ResampleFilter::nearest:
      return "nearest";
    case ResampleFilter::lanczos:
      return "lanczos";
    case ResampleFilter::bilinear:
      return "bilinear";
    case ResampleFilter::bicubic:
      return "bicubic";
    case ResampleFilter::box:
      return "box";
    case ResampleFilter::hamming:
      return "hamming";
  }
  return "unknown";
}

void resize_like_pillow(const uint8_t* in, int64_t in_width, int64_t in_height, int channels, uint8_t* out,
                        int64_t out_width, int64_t out_height, ResampleFilter filter) {
  VP_REQUIRE(channels == 1 || channels == 3, "resize: expected 1 or 3 channels, got ", channels);
  VP_REQUIRE(in_width > 0 && in_height > 0, "resize: empty input image ", in_width, "x", in_height);
  VP_REQUIRE(out_width > 0 && out_height > 0, "resize: output size must be positive, got ", out_width, "x", out_height);
  VP_REQUIRE(in_width < (int64_t{1} << 31) && in_height < (int64_t{1} << 31) && out_width < (int64_t{1} << 31) &&
                 out_height < (int64_t{1} << 31),
             "resize: sizes beyond 2^31 are not supported");
  resample_filter_from_pil(static_cast<int>(filter));  // validates
  if (in_width == out_width && in_height == out_height) {
    std::copy(in, in + in_width * in_height * channels, out);  // Pillow returns a copy
    return;
  }
  if (filter == ResampleFilter::nearest) {
    resize_nearest(in, in_width, in_height, channels, out, out_width, out_height);
  } else if (channels == 1) {
    resize_convolution<1>(in, in_width, in_height, out, out_width, out_height, filter);
  } else {
    resize_convolution<3>(in, in_width, in_height, out, out_width, out_height, filter);
  }
}

DecodedImage resize_like_pillow(const DecodedImage& image, int64_t out_width, int64_t out_height,
                                ResampleFilter filter) {
  DecodedImage out;
  out.width = out_width;
  out.height = out_height;
  out.channels = image.channels;
  out.pixels.resize(static_cast<size_t>(out_width * out_height * image.channels));
  resize_like_pillow(image.pixels.data(), image.width, image.height, image.channels, out.pixels.data(), out_width,
                     out_height, filter);
  return out;
}

RgbImage resize_like_pillow(const RgbImage& image, int64_t out_width, int64_t out_height, ResampleFilter filter) {
  RgbImage out;
  out.width = out_width;
  out.height = out_height;
  out.pixels.resize(static_cast<size_t>(out_width * out_height * 3));
  resize_like_pillow(image.pixels.data(), image.width, image.height, 3, out.pixels.data(), out_width, out_height,
                     filter);
  return out;
}

}  // namespace vitpipe
