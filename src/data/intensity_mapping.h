// The arithmetic of the intensity policies (data/image_read_options.h): each maps a value to a real y in [0, 255] in
// double precision, then rounds once, level = floor(y + 0.5). The tests' numpy references write the same operations
// in the same order, and this file is compiled without floating-point contraction (no fused multiply-add), so both
// compute the same doubles and the same levels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/image_read_options.h"

namespace vitpipe {

// floor(y + 0.5), clamped to 0..255.
uint8_t round_level(double y);

// full-range: value * 255 / (2^bits - 1), value in [0, 2^bits - 1].
double full_range_value(double value, int bits);

// DICOM PS3.3 C.11.2.1.2 VOI LUT functions onto [0, 255] (ymin = 0, ymax = 255):
//   LINEAR (C.11.2.1.2.1, width >= 1):  x <= c - 0.5 - (w - 1) / 2 -> 0;  x > c - 0.5 + (w - 1) / 2 -> 255;
//                                       else ((x - (c - 0.5)) / (w - 1) + 0.5) * 255
//   LINEAR_EXACT (C.11.2.1.3.2, w > 0): x <= c - w / 2 -> 0;  x > c + w / 2 -> 255;  else (x - c) / w * 255 + 127.5
//   SIGMOID (C.11.2.1.3.1, w > 0):      255 / (1 + exp(-4 * (x - c) / w))
double linear_window_value(double x, double centre, double width);
double linear_exact_window_value(double x, double centre, double width);
double sigmoid_window_value(double x, double centre, double width);

// percentile: [low, high] linearly onto [0, 255]: x <= low -> 0; x >= high -> 255; else (x - low) / (high - low) *
// 255. (high == low: x <= low -> 0, else 255.)
double range_value(double x, double low, double high);

// numpy.percentile(values, q) (method "linear") of a multiset given as (value, count) pairs sorted by value, with
// `total` = the sum of the counts: index = (total - 1) * (q / 100), then numpy's interpolation between neighbours.
double percentile_of_counts(const std::vector<std::pair<double, int64_t>>& sorted_counts, int64_t total, double q);

// Gray samples above 8 bits (a 16-bit PNG: values 0..65535, bits = 16) -> 8-bit levels by the policy; `automatic`
// is full-range (see warn_full_range_once). Pillow's policy clips to 0..255.
void gray16_to_levels(const uint16_t* samples, size_t count, int bits, const IntensityPolicy& policy, uint8_t* out);

// The one warning of the `auto` policy, printed the first time a process scales a gray PNG above 8 bits.
void warn_full_range_once(const std::string& name, int bits);

}  // namespace vitpipe
