#include "data/augmentation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#if defined(__AVX512F__)
// GCC 12 warns falsely about _mm512_undefined_* inside its own AVX-512 shift intrinsics (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "data/image_processor.h"
#include "util/error.h"
#include "util/random.h"

namespace vitpipe {
namespace {

constexpr int kFracBits = 16;   // source coordinates in 16.16 fixed point
constexpr int kWeightBits = 8;  // bilinear weights in 0..256

// table[channel][v] after brightness/contrast: the jitter is a uint8 -> uint8 map, composed with normalisation.
NormalizationTable jittered_table(const NormalizationTable& table, const StoredImage& source,
                                  const AugmentationDraw& draw) {
  if (draw.brightness == 1.0 && draw.contrast == 1.0) return table;
  const int64_t count = source.width * source.height;
  double mean = 0;
  if (draw.contrast != 1.0) {
    // Contrast blends with the mean gray level (ITU-R 601 luma for colour, as torchvision does).
    uint64_t sum = 0;
    if (source.channels == 1) {
      int64_t i = 0;
#if defined(__AVX512BW__)
      __m512i acc = _mm512_setzero_si512();
      for (; i + 64 <= count; i += 64)
        acc = _mm512_add_epi64(acc, _mm512_sad_epu8(_mm512_loadu_si512(source.pixels + i), _mm512_setzero_si512()));
      sum = static_cast<uint64_t>(_mm512_reduce_add_epi64(acc));
#endif
      for (; i < count; ++i) sum += source.pixels[i];
      mean = static_cast<double>(1000 * sum) / static_cast<double>(1000 * count);
    } else {
      uint64_t r = 0, g = 0, b = 0;
      for (int64_t i = 0; i < count; ++i) {
        r += source.pixels[3 * i];
        g += source.pixels[3 * i + 1];
        b += source.pixels[3 * i + 2];
      }
      // Integer weights: a colour image with R = G = B gets exactly its gray twin's mean (cache vs files).
      mean = static_cast<double>(299 * r + 587 * g + 114 * b) / static_cast<double>(1000 * count);
    }
  }
  const double bright_mean = mean * draw.brightness;
  NormalizationTable out;
  for (int v = 0; v < 256; ++v) {
    double y = (v * draw.brightness - bright_mean) * draw.contrast + bright_mean;
    const auto j = static_cast<size_t>(std::clamp(y, 0.0, 255.0) + 0.5);  // round half up
    for (int c = 0; c < 3; ++c) out[c][v] = table[c][j];
  }
  return out;
}

}  // namespace

AugmentationDraw draw_augmentation(const AugmentationSettings& s, int64_t width, int64_t height, uint64_t seed,
                                   int64_t epoch, int64_t sample_index) {
  Rng rng({seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(sample_index)});
  AugmentationDraw d;
  const double w_full = static_cast<double>(width), h_full = static_cast<double>(height);
  d.crop_x = 0;
  d.crop_y = 0;
  d.crop_width = w_full;
  d.crop_height = h_full;
  // torchvision's RandomResizedCrop: up to 10 tries at a crop of random area and aspect ratio that fits; the
  // 10 tries are always drawn so later draws do not depend on which one fitted.
  bool found = false;
  const double log_ratio_min = std::log(s.crop_ratio_min), log_ratio_max = std::log(s.crop_ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double area = w_full * h_full * rng.uniform(s.crop_scale_min, s.crop_scale_max);
    const double ratio = std::exp(rng.uniform(log_ratio_min, log_ratio_max));
    const double u = rng.uniform(), v = rng.uniform();
    const double w = std::sqrt(area * ratio), h = std::sqrt(area / ratio);
    if (!found && w > 0 && h > 0 && w <= w_full && h <= h_full) {
      d.crop_width = w;
      d.crop_height = h;
      d.crop_x = u * (w_full - w);
      d.crop_y = v * (h_full - h);
      found = true;
    }
  }
  const double angle = rng.uniform(-1.0, 1.0) * s.max_rotation_degrees * std::numbers::pi / 180.0;
  const bool flip = rng.uniform() < 0.5;
  const double brightness = rng.uniform(1.0 - s.brightness, 1.0 + s.brightness);
  const double contrast = rng.uniform(1.0 - s.contrast, 1.0 + s.contrast);
  if (!s.random_resized_crop || !found) {
    d.crop_x = d.crop_y = 0;
    d.crop_width = w_full;
    d.crop_height = h_full;
  }
  if (s.rotation) d.angle_radians = angle;
  if (s.horizontal_flip) d.flip = flip;
  if (s.color_jitter) {
    d.brightness = brightness;
    d.contrast = contrast;
  }
  return d;
}

NormalizationTable normalization_table(const PreprocessorConfig& config) {
  ImageProcessor processor(config);
  NormalizationTable table;
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) table[c][v] = processor.table_value(c, static_cast<uint8_t>(v));
  return table;
}

void normalize_to_chw(const StoredImage& source, const NormalizationTable& table, float* out_chw) {
  const int64_t count = source.width * source.height;
  for (int c = 0; c < 3; ++c) {
    const float* t = table[c].data();
    float* dst = out_chw + c * count;
    if (source.channels == 1) {
      for (int64_t i = 0; i < count; ++i) dst[i] = t[source.pixels[i]];
    } else {
      for (int64_t i = 0; i < count; ++i) dst[i] = t[source.pixels[3 * i + c]];
    }
  }
}

namespace {

// The affine map output (x, y) -> source position in 16.16 fixed point: sx = row_x(y) + step_x * x, and the same
// for sy. Sampling: x0 = floor(sx) clamped to [0, W-2] with weight wx of pixel x0+1 (0..256, 256 past the right
// edge, 0 before the left one): edges are replicated, and the vector and scalar code compute the same integers.
struct Warp {
  int32_t step_x, step_y;
  std::vector<int32_t> row_x, row_y;
};

Warp make_warp(const AugmentationDraw& draw, int64_t out_size) {
  // Output pixel centre (x + 0.5, y + 0.5) -> crop-relative (u, v) -> rotated about the crop centre -> source
  // position, minus 0.5 to index pixel centres.
  const double scale_x = draw.crop_width / static_cast<double>(out_size);
  const double scale_y = draw.crop_height / static_cast<double>(out_size);
  const double flip = draw.flip ? -1.0 : 1.0;
  const double cos_a = std::cos(draw.angle_radians), sin_a = std::sin(draw.angle_radians);
  const double centre_x = draw.crop_x + draw.crop_width / 2, centre_y = draw.crop_y + draw.crop_height / 2;
  const double ax = cos_a * scale_x * flip, bx = -sin_a * scale_y;
  const double ay = sin_a * scale_x * flip, by = cos_a * scale_y;
  const double half = (static_cast<double>(out_size) - 1.0) / 2.0;
  const double cx = centre_x - 0.5 - ax * half - bx * half;
  const double cy = centre_y - 0.5 - ay * half - by * half;
  const double one = static_cast<double>(1 << kFracBits);
  const auto fixed = [&](double value) { return static_cast<int32_t>(std::lround(value * one)); };
  Warp warp;
  warp.step_x = fixed(ax);
  warp.step_y = fixed(ay);
  warp.row_x.resize(static_cast<size_t>(out_size));
  warp.row_y.resize(static_cast<size_t>(out_size));
  for (int64_t y = 0; y < out_size; ++y) {
    warp.row_x[static_cast<size_t>(y)] = fixed(bx * static_cast<double>(y) + cx);
    warp.row_y[static_cast<size_t>(y)] = fixed(by * static_cast<double>(y) + cy);
  }
  return warp;
}

constexpr int32_t kOne = 1 << kWeightBits;

inline void split_coordinate(int32_t s, int32_t max0, int32_t* i0, int32_t* w) {
  int32_t i = s >> kFracBits;  // floor, also for negatives
  int32_t weight = (s >> (kFracBits - kWeightBits)) & (kOne - 1);
  if (i < 0) {
    i = 0;
    weight = 0;
  } else if (i > max0) {
    i = max0;
    weight = kOne;
  }
  *i0 = i;
  *w = weight;
}

void warp_scalar(const StoredImage& source, const Warp& warp, const NormalizationTable& table, int64_t out_size,
                 float* out_chw) {
  const int channels = source.channels;
  const int32_t max_x0 = static_cast<int32_t>(source.width - 2), max_y0 = static_cast<int32_t>(source.height - 2);
  const int64_t stride = source.width * channels;
  const int64_t plane = out_size * out_size;
  for (int64_t y = 0; y < out_size; ++y) {
    for (int64_t x = 0; x < out_size; ++x) {
      int32_t x0, wx, y0, wy;
      split_coordinate(warp.row_x[static_cast<size_t>(y)] + warp.step_x * static_cast<int32_t>(x), max_x0, &x0, &wx);
      split_coordinate(warp.row_y[static_cast<size_t>(y)] + warp.step_y * static_cast<int32_t>(x), max_y0, &y0, &wy);
      const uint8_t* p0 = source.pixels + y0 * stride + x0 * channels;
      const uint8_t* p1 = p0 + stride;
      for (int c = 0; c < 3; ++c) {
        const int k = channels == 1 ? 0 : c;
        const int32_t top = p0[k] * (kOne - wx) + p0[k + channels] * wx;
        const int32_t bottom = p1[k] * (kOne - wx) + p1[k + channels] * wx;
        const int32_t value = (top * (kOne - wy) + bottom * wy + (1 << (2 * kWeightBits - 1))) >> (2 * kWeightBits);
        out_chw[c * plane + y * out_size + x] = table[c][static_cast<size_t>(value)];
      }
    }
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VBMI__)
// A 256-entry float table as four 256-entry byte tables (byte k of every float), each in four registers, so that
// 64 lookups are 3 byte permutes per byte plane instead of four slow float gathers.
struct ByteTables {
  __m512i plane[4][4];  // [byte of the float][64-entry quarter]
};

ByteTables make_byte_tables(const std::array<float, 256>& table) {
  alignas(64) uint8_t bytes[4][256];
  for (int v = 0; v < 256; ++v) {
    uint32_t bits;
    std::memcpy(&bits, &table[static_cast<size_t>(v)], 4);
    for (int k = 0; k < 4; ++k) bytes[k][v] = static_cast<uint8_t>(bits >> (8 * k));
  }
  ByteTables t;
  for (int k = 0; k < 4; ++k)
    for (int q = 0; q < 4; ++q) t.plane[k][q] = _mm512_load_si512(bytes[k] + 64 * q);
  return t;
}

// 64 uint8 values (pre-permuted, see below) -> 64 floats table[value] in natural order, as four vectors of 16.
inline void lookup64(const ByteTables& t, __m512i values, __m512 out[4]) {
  const __mmask64 high = _mm512_movepi8_mask(values);  // values >= 128 come from the upper two quarters
  __m512i b[4];
  for (int k = 0; k < 4; ++k) {
    const __m512i low = _mm512_permutex2var_epi8(t.plane[k][0], values, t.plane[k][1]);
    const __m512i upper = _mm512_permutex2var_epi8(t.plane[k][2], values, t.plane[k][3]);
    b[k] = _mm512_mask_blend_epi8(high, low, upper);
  }
  // Interleave bytes into floats. The unpacks work within 128-bit lanes; the values were permuted beforehand so
  // that the result comes out in order.
  const __m512i w01_lo = _mm512_unpacklo_epi8(b[0], b[1]), w01_hi = _mm512_unpackhi_epi8(b[0], b[1]);
  const __m512i w23_lo = _mm512_unpacklo_epi8(b[2], b[3]), w23_hi = _mm512_unpackhi_epi8(b[2], b[3]);
  out[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(w01_lo, w23_lo));
  out[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(w01_lo, w23_lo));
  out[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(w01_hi, w23_hi));
  out[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(w01_hi, w23_hi));
}

// After the unpacks, vector k, lane L, element e holds byte position 16L + 4k + e; we want it to be pixel
// 16k + 4L + e, so byte position p must hold value[transpose(p)].
__m512i lookup_order() {
  alignas(64) uint8_t order[64];
  for (int lane = 0; lane < 4; ++lane)
    for (int k = 0; k < 4; ++k)
      for (int e = 0; e < 4; ++e) order[16 * lane + 4 * k + e] = static_cast<uint8_t>(16 * k + 4 * lane + e);
  return _mm512_load_si512(order);
}

// Gray source, 16 output pixels per step: two dword gathers fetch (p[x0], p[x0+1]) of rows y0 and y0+1, vpmaddwd
// weighs them; every 64 pixels the table lookup runs on bytes. Over-reads up to 3 bytes past the image (padded).
void warp_gray_avx512(const StoredImage& source, const Warp& warp, const NormalizationTable& table, int64_t out_size,
                      float* out_chw) {
  const int32_t width = static_cast<int32_t>(source.width);
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i one = _mm512_set1_epi32(kOne);
  const __m512i max_x0 = _mm512_set1_epi32(static_cast<int32_t>(source.width - 2));
  const __m512i max_y0 = _mm512_set1_epi32(static_cast<int32_t>(source.height - 2));
  const __m512i weight_mask = _mm512_set1_epi32(kOne - 1);
  const __m512i byte0 = _mm512_set1_epi32(0xFF), byte1_to_word1 = _mm512_set1_epi32(0xFF0000);
  const __m512i stride = _mm512_set1_epi32(width);
  const __m512i rounding = _mm512_set1_epi32(1 << (2 * kWeightBits - 1));
  const __m512i step_x = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(warp.step_x));
  const __m512i step_y = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(warp.step_y));
  const __m512i step16_x = _mm512_set1_epi32(warp.step_x * 16), step16_y = _mm512_set1_epi32(warp.step_y * 16);
  const __m512i order = lookup_order();
  const __m512i one_lane = _mm512_set1_epi32(1), two_lanes = _mm512_set1_epi32(2);
  constexpr __mmask64 kPairBytes = 0x5555555555555555ull;  // bytes 0 and 2 of every lane
  const bool same_tables = table[0] == table[1] && table[0] == table[2];
  const int channel_tables = same_tables ? 1 : 3;
  ByteTables tables[3];
  for (int c = 0; c < channel_tables; ++c) tables[c] = make_byte_tables(table[static_cast<size_t>(c)]);
  const int64_t plane = out_size * out_size;
  const auto* pixels = reinterpret_cast<const int*>(source.pixels);

  auto split = [&](__m512i s, __m512i max0, __m512i* i0, __m512i* w) {
    __m512i i = _mm512_srai_epi32(s, kFracBits);
    __m512i weight = _mm512_and_si512(_mm512_srai_epi32(s, kFracBits - kWeightBits), weight_mask);
    const __mmask16 below = _mm512_cmplt_epi32_mask(i, zero);
    const __mmask16 above = _mm512_cmpgt_epi32_mask(i, max0);
    i = _mm512_mask_mov_epi32(i, below, zero);
    weight = _mm512_mask_mov_epi32(weight, below, zero);
    i = _mm512_mask_mov_epi32(i, above, max0);
    weight = _mm512_mask_mov_epi32(weight, above, one);
    *i0 = i;
    *w = weight;
  };

  // Output pixels are produced in runs of 64 along the image in raster order (rows may be any length).
  const int64_t total = plane;
  alignas(64) float staging[64];
  // Streaming stores skip reading the destination into the cache: the batch is written once, read later.
  const bool stream = reinterpret_cast<uintptr_t>(out_chw) % 64 == 0 && plane % 16 == 0;
  int64_t y = 0, x = 0;
  __m512i sx = _mm512_add_epi32(_mm512_set1_epi32(warp.row_x[0]), step_x);
  __m512i sy = _mm512_add_epi32(_mm512_set1_epi32(warp.row_y[0]), step_y);
  for (int64_t start = 0; start < total; start += 64) {
    __m512i quarters[4];
    for (int q = 0; q < 4; ++q) {
      __m512i value = zero;
      if (start + 16 * q < total) {
        // 16 pixels, possibly spanning a row end: lanes past the row take the next row's coordinates.
        __m512i csx = sx, csy = sy;
        const int64_t left = out_size - x;
        if (left < 16) {
          const __mmask16 next_row = static_cast<__mmask16>(~((1u << left) - 1));
          if (y + 1 < out_size) {
            const __m512i shifted = _mm512_sub_epi32(lanes, _mm512_set1_epi32(static_cast<int32_t>(left)));
            csx = _mm512_mask_add_epi32(csx, next_row, _mm512_set1_epi32(warp.row_x[static_cast<size_t>(y + 1)]),
                                        _mm512_mullo_epi32(shifted, _mm512_set1_epi32(warp.step_x)));
            csy = _mm512_mask_add_epi32(csy, next_row, _mm512_set1_epi32(warp.row_y[static_cast<size_t>(y + 1)]),
                                        _mm512_mullo_epi32(shifted, _mm512_set1_epi32(warp.step_y)));
          }
        }
        __m512i x0, wx, y0, wy;
        split(csx, max_x0, &x0, &wx);
        split(csy, max_y0, &y0, &wy);
        __m512i pair0, pair1;  // (p[x0], p[x0+1]) of rows y0 and y0+1 as two int16 words per lane
        bool windowed = false;
        if (left >= 16) {
          // Within one row the coordinates are monotone in the lane, so lanes 0 and 15 bound them. When the 16
          // samples fall in a 64-byte window of at most 4 rows, byte permutes of 4 row loads replace the gathers.
          const int32_t xa = _mm512_cvtsi512_si32(x0), xb = _mm_extract_epi32(_mm512_extracti32x4_epi32(x0, 3), 3);
          const int32_t ya = _mm512_cvtsi512_si32(y0), yb = _mm_extract_epi32(_mm512_extracti32x4_epi32(y0, 3), 3);
          const int32_t x_lo = std::min(xa, xb), y_lo = std::min(ya, yb);
          const int32_t rows = std::max(ya, yb) - y_lo;
          if (std::max(xa, xb) - x_lo <= 62 && rows <= 2) {
            const __m512i rel = _mm512_sub_epi32(x0, _mm512_set1_epi32(x_lo));
            const __m512i picks = _mm512_or_si512(rel, _mm512_slli_epi32(_mm512_add_epi32(rel, one_lane), 16));
            const __m512i dy = _mm512_sub_epi32(y0, _mm512_set1_epi32(y_lo));
            const __mmask16 second = _mm512_cmpeq_epi32_mask(dy, one_lane);
            const __mmask16 third = _mm512_cmpeq_epi32_mask(dy, two_lanes);
            const uint8_t* base = source.pixels + static_cast<int64_t>(y_lo) * width + x_lo;
            const __m512i w0 = _mm512_maskz_permutexvar_epi8(kPairBytes, picks, _mm512_loadu_si512(base));
            const __m512i w1 = _mm512_maskz_permutexvar_epi8(kPairBytes, picks, _mm512_loadu_si512(base + width));
            __m512i w2 = w1, w3 = w1;
            if (rows >= 1) w2 = _mm512_maskz_permutexvar_epi8(kPairBytes, picks, _mm512_loadu_si512(base + 2 * width));
            if (rows >= 2) w3 = _mm512_maskz_permutexvar_epi8(kPairBytes, picks, _mm512_loadu_si512(base + 3 * width));
            pair0 = _mm512_mask_mov_epi32(_mm512_mask_mov_epi32(w0, second, w1), third, w2);
            pair1 = _mm512_mask_mov_epi32(_mm512_mask_mov_epi32(w1, second, w2), third, w3);
            windowed = true;
          }
        }
        if (!windowed) {
          const __m512i index = _mm512_add_epi32(_mm512_mullo_epi32(y0, stride), x0);
          const __m512i d0 = _mm512_i32gather_epi32(index, pixels, 1);
          const __m512i d1 = _mm512_i32gather_epi32(_mm512_add_epi32(index, stride), pixels, 1);
          pair0 =
              _mm512_or_si512(_mm512_and_si512(d0, byte0), _mm512_and_si512(_mm512_slli_epi32(d0, 8), byte1_to_word1));
          pair1 =
              _mm512_or_si512(_mm512_and_si512(d1, byte0), _mm512_and_si512(_mm512_slli_epi32(d1, 8), byte1_to_word1));
        }
        const __m512i weights = _mm512_or_si512(_mm512_sub_epi32(one, wx), _mm512_slli_epi32(wx, 16));
        const __m512i top = _mm512_madd_epi16(pair0, weights);
        const __m512i bottom = _mm512_madd_epi16(pair1, weights);
        value = _mm512_add_epi32(_mm512_mullo_epi32(top, _mm512_sub_epi32(one, wy)),
                                 _mm512_add_epi32(_mm512_mullo_epi32(bottom, wy), rounding));
        value = _mm512_srli_epi32(value, 2 * kWeightBits);
        // Advance 16 pixels along the raster.
        x += 16;
        sx = _mm512_add_epi32(sx, step16_x);
        sy = _mm512_add_epi32(sy, step16_y);
        if (x >= out_size) {
          x -= out_size;
          ++y;
          if (y < out_size) {
            const __m512i at = _mm512_add_epi32(lanes, _mm512_set1_epi32(static_cast<int32_t>(x)));
            sx = _mm512_add_epi32(_mm512_set1_epi32(warp.row_x[static_cast<size_t>(y)]),
                                  _mm512_mullo_epi32(at, _mm512_set1_epi32(warp.step_x)));
            sy = _mm512_add_epi32(_mm512_set1_epi32(warp.row_y[static_cast<size_t>(y)]),
                                  _mm512_mullo_epi32(at, _mm512_set1_epi32(warp.step_y)));
          }
        }
      }
      quarters[q] = value;
    }
    // 4 x 16 int32 -> 64 bytes, permuted for the lookup.
    const __m512i packed = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(quarters[0])),
                                                       _mm512_cvtepi32_epi8(quarters[1]), 1)),
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(quarters[2])),
                                _mm512_cvtepi32_epi8(quarters[3]), 1),
        1);
    const __m512i values = _mm512_permutexvar_epi8(order, packed);
    const int64_t count = std::min<int64_t>(64, total - start);
    for (int c = 0; c < channel_tables; ++c) {
      __m512 floats[4];
      lookup64(tables[c], values, floats);
      // Gray with equal tables: the same numbers go to all three planes.
      for (int plane_index = c; plane_index < (same_tables ? 3 : c + 1); ++plane_index) {
        float* dst = out_chw + plane_index * plane + start;
        if (count == 64 && stream) {
          for (int q = 0; q < 4; ++q) _mm512_stream_ps(dst + 16 * q, floats[q]);
        } else if (count == 64) {
          for (int q = 0; q < 4; ++q) _mm512_storeu_ps(dst + 16 * q, floats[q]);
        } else {
          for (int q = 0; q < 4; ++q) _mm512_store_ps(staging + 16 * q, floats[q]);
          std::copy_n(staging, count, dst);
        }
      }
    }
  }
  if (stream) _mm_sfence();
}
#endif

}  // namespace

void augment_to_chw_reference(const StoredImage& source, const AugmentationDraw& draw,
                              const NormalizationTable& base_table, int64_t out_size, float* out_chw) {
  VP_REQUIRE(source.channels == 1 || source.channels == 3, "augmentation: expected 1 or 3 channels");
  VP_REQUIRE(source.width >= 2 && source.height >= 2 && out_size > 0, "augmentation: image smaller than 2x2");
  VP_REQUIRE(source.width < 16384 && source.height < 16384, "augmentation: image too large for 16.16 coordinates");
  warp_scalar(source, make_warp(draw, out_size), jittered_table(base_table, source, draw), out_size, out_chw);
}

void augment_to_chw(const StoredImage& source, const AugmentationDraw& draw, const NormalizationTable& base_table,
                    int64_t out_size, float* out_chw) {
  VP_REQUIRE(source.channels == 1 || source.channels == 3, "augmentation: expected 1 or 3 channels");
  VP_REQUIRE(source.width >= 2 && source.height >= 2 && out_size > 0, "augmentation: image smaller than 2x2");
  VP_REQUIRE(source.width < 16384 && source.height < 16384, "augmentation: image too large for 16.16 coordinates");
  const Warp warp = make_warp(draw, out_size);
  const NormalizationTable table = jittered_table(base_table, source, draw);
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VBMI__)
  if (source.channels == 1 && source.padded) {
    warp_gray_avx512(source, warp, table, out_size, out_chw);
    return;
  }
#endif
  warp_scalar(source, warp, table, out_size, out_chw);
}

}  // namespace vitpipe
