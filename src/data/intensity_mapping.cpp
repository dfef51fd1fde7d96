#include "data/intensity_mapping.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "util/error.h"
#include "util/log.h"

namespace vitpipe {

uint8_t round_level(double y) {
  const double level = std::floor(y + 0.5);
  if (!(level > 0.0)) return 0;  // also NaN
  if (level >= 255.0) return 255;
  return static_cast<uint8_t>(level);
}

double full_range_value(double value, int bits) { return value * 255.0 / (std::ldexp(1.0, bits) - 1.0); }

double linear_window_value(double x, double centre, double width) {
  if (x <= centre - 0.5 - (width - 1.0) / 2.0) return 0.0;
  if (x > centre - 0.5 + (width - 1.0) / 2.0) return 255.0;
  return ((x - (centre - 0.5)) / (width - 1.0) + 0.5) * 255.0;
}

double linear_exact_window_value(double x, double centre, double width) {
  if (x <= centre - width / 2.0) return 0.0;
  if (x > centre + width / 2.0) return 255.0;
  return (x - centre) / width * 255.0 + 127.5;
}

double sigmoid_window_value(double x, double centre, double width) {
  return 255.0 / (1.0 + std::exp(-4.0 * (x - centre) / width));
}

double range_value(double x, double low, double high) {
  if (x <= low) return 0.0;
  if (x >= high) return 255.0;
  return (x - low) / (high - low) * 255.0;
}

double percentile_of_counts(const std::vector<std::pair<double, int64_t>>& sorted_counts, int64_t total, double q) {
  VP_REQUIRE(total > 0 && !sorted_counts.empty(), "percentile of an empty image");
  const double index = static_cast<double>(total - 1) * (q / 100.0);
  const double previous = std::floor(index);
  const int64_t lo = std::min(static_cast<int64_t>(previous), total - 1);
  const int64_t hi = std::min(lo + 1, total - 1);
  const double gamma = index - previous;
  // The lo-th and hi-th values of the sorted multiset.
  double a = sorted_counts.back().first, b = a;
  int64_t seen = 0;
  bool found_a = false;
  for (const auto& [value, count] : sorted_counts) {
    seen += count;
    if (!found_a && lo < seen) {
      a = value;
      found_a = true;
    }
    if (hi < seen) {
      b = value;
      break;
    }
  }
  const double diff = b - a;
  return gamma >= 0.5 ? b - diff * (1.0 - gamma) : a + diff * gamma;  // numpy's _lerp
}

void gray16_to_levels(const uint16_t* samples, size_t count, int bits, const IntensityPolicy& policy, uint8_t* out) {
  std::vector<uint8_t> table(65536);
  switch (policy.kind) {
    case IntensityKind::pillow:
      for (int v = 0; v < 65536; ++v) table[static_cast<size_t>(v)] = static_cast<uint8_t>(std::min(v, 255));
      break;
    case IntensityKind::automatic:
    case IntensityKind::full_range: {
      const int top = (1 << bits) - 1;
      for (int v = 0; v < 65536; ++v)
        table[static_cast<size_t>(v)] = round_level(full_range_value(static_cast<double>(std::min(v, top)), bits));
      break;
    }
    case IntensityKind::window:
      for (int v = 0; v < 65536; ++v)
        table[static_cast<size_t>(v)] = round_level(linear_window_value(v, policy.first, policy.second));
      break;
    case IntensityKind::percentile: {
      std::vector<int64_t> histogram(65536, 0);
      for (size_t i = 0; i < count; ++i) ++histogram[samples[i]];
      std::vector<std::pair<double, int64_t>> counts;
      for (int v = 0; v < 65536; ++v)
        if (histogram[static_cast<size_t>(v)] > 0) counts.emplace_back(v, histogram[static_cast<size_t>(v)]);
      const auto total = static_cast<int64_t>(count);
      const double low = percentile_of_counts(counts, total, policy.first);
      const double high = percentile_of_counts(counts, total, policy.second);
      for (int v = 0; v < 65536; ++v) table[static_cast<size_t>(v)] = round_level(range_value(v, low, high));
      break;
    }
  }
  for (size_t i = 0; i < count; ++i) out[i] = table[samples[i]];
}

void warn_full_range_once(const std::string& name, int bits) {
  static std::once_flag once;
  std::call_once(once, [&] {
    warn(name, ": ", bits, "-bit gray image scaled to 8 bits over its full range (value x 255 / ", (1 << bits) - 1,
         "; --intensity full-range, the default for such images). Pillow and transformers' image processor clip it to "
         "0..255 instead (--intensity pillow keeps that); this is said once");
  });
}

}  // namespace vitpipe
