#include "data/dicom_pixels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "data/intensity_mapping.h"
#include "util/error.h"

namespace vitpipe {
namespace {

int64_t stored_value(uint32_t word, const DicomPixelModule& m) {
  const int shift = m.high_bit + 1 - m.bits_stored;
  const uint32_t value = (word >> shift) & ((uint32_t{1} << m.bits_stored) - 1);
  if (m.is_signed && ((value >> (m.bits_stored - 1)) & 1u) != 0)
    return static_cast<int64_t>(value) - (int64_t{1} << m.bits_stored);
  return value;
}

double lut_value(const DicomLut& lut, double x) {
  const double index = std::floor(x) - static_cast<double>(lut.first_input);
  if (index <= 0) return lut.data.front();
  if (index >= static_cast<double>(lut.entries - 1)) return lut.data.back();
  return lut.data[static_cast<size_t>(index)];
}

double modality_value(int64_t sv, const DicomPixelModule& m) {
  if (m.modality_lut) return lut_value(*m.modality_lut, static_cast<double>(sv));
  return static_cast<double>(sv) * m.rescale_slope + m.rescale_intercept;
}

uint32_t word_at(const uint8_t* frame, size_t i, int bits_allocated) {
  if (bits_allocated == 8) return frame[i];
  return static_cast<uint32_t>(frame[2 * i]) | (static_cast<uint32_t>(frame[2 * i + 1]) << 8);
}

// The modality values present in the image with their pixel counts, sorted by value.
std::vector<std::pair<double, int64_t>> present_values(const uint8_t* frame, size_t pixels, const DicomPixelModule& m,
                                                       const std::vector<double>& mv_of_word) {
  std::vector<int64_t> histogram(mv_of_word.size(), 0);
  for (size_t i = 0; i < pixels; ++i) ++histogram[word_at(frame, i, m.bits_allocated)];
  std::vector<std::pair<double, int64_t>> values;
  for (size_t w = 0; w < histogram.size(); ++w)
    if (histogram[w] > 0) values.emplace_back(mv_of_word[w], histogram[w]);
  std::stable_sort(values.begin(), values.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return values;
}

std::string voi_inventory(const DicomPixelModule& m) {
  return concat(m.windows.size(), " window(s) ((0028,1050) Window Center) and ", m.voi_luts.size(),
                " VOI LUT(s) ((0028,3010) VOI LUT Sequence)");
}

DecodedImage colour_image(const uint8_t* frame, const DicomPixelModule& m) {
  DecodedImage out;
  out.width = m.columns;
  out.height = m.rows;
  out.channels = 3;
  const auto pixels = static_cast<size_t>(m.rows * m.columns);
  out.pixels.resize(pixels * 3);
  if (m.planar_configuration == 0) {
    std::memcpy(out.pixels.data(), frame, pixels * 3);
  } else {
    for (size_t i = 0; i < pixels; ++i)
      for (size_t c = 0; c < 3; ++c) out.pixels[3 * i + c] = frame[c * pixels + i];
  }
  return out;
}

}  // namespace

DecodedImage dicom_frame_to_image(const uint8_t* frame, const DicomPixelModule& m, const ImageReadOptions& options,
                                  const std::string& name) {
  if (!m.gray()) return colour_image(frame, m);
  const IntensityPolicy& policy = options.intensity;
  VP_REQUIRE(policy.kind != IntensityKind::pillow, name,
             ": --intensity pillow applies to PNG only (Pillow does not read DICOM); use auto, full-range, "
             "window:C,W or percentile:LO,HI");
  const auto pixels = static_cast<size_t>(m.rows * m.columns);
  const size_t words = size_t{1} << m.bits_allocated;
  std::vector<int64_t> sv_of_word(words);
  std::vector<double> mv_of_word(words);
  for (size_t w = 0; w < words; ++w) {
    sv_of_word[w] = stored_value(static_cast<uint32_t>(w), m);
    mv_of_word[w] = modality_value(sv_of_word[w], m);
  }

  // y as a function of (sv, mv), chosen once for the image.
  enum class Rule { full_range, window, range, lut } rule = Rule::window;
  double centre = 0, width = 1, low = 0, high = 0;
  VoiFunction function = VoiFunction::linear;
  const DicomLut* lut = nullptr;
  auto use_min_max = [&] {
    const auto values = present_values(frame, pixels, m, mv_of_word);
    const double min = values.front().first, max = values.back().first;
    centre = (min + max + 1.0) / 2.0;  // DCMTK's --min-max-window
    width = max - min + 1.0;
    function = VoiFunction::linear;
    rule = Rule::window;
  };
  switch (policy.kind) {
    case IntensityKind::full_range:
      rule = Rule::full_range;
      break;
    case IntensityKind::window:
      centre = policy.first;
      width = policy.second;
      break;
    case IntensityKind::percentile: {
      const auto values = present_values(frame, pixels, m, mv_of_word);
      low = percentile_of_counts(values, static_cast<int64_t>(pixels), policy.first);
      high = percentile_of_counts(values, static_cast<int64_t>(pixels), policy.second);
      rule = Rule::range;
      break;
    }
    case IntensityKind::pillow:
    case IntensityKind::automatic: {
      const size_t available = m.windows.size() + m.voi_luts.size();
      const DicomWindowChoice& choice = options.dicom_window;
      if (choice.kind == DicomWindowKind::minmax || (choice.kind == DicomWindowKind::first && available == 0)) {
        use_min_max();
        break;
      }
      const size_t index = choice.kind == DicomWindowKind::first ? 0 : static_cast<size_t>(choice.index - 1);
      VP_REQUIRE(index < available, name, ": --dicom-window ", choice.index, " asks for VOI transform ", choice.index,
                 ", but the file has ", voi_inventory(m));
      if (index < m.windows.size()) {
        centre = m.windows[index].centre;
        width = m.windows[index].width;
        function = m.voi_function;
      } else {
        lut = &m.voi_luts[index - m.windows.size()];
        rule = Rule::lut;
      }
      break;
    }
  }

  const int64_t smallest = m.is_signed ? -(int64_t{1} << (m.bits_stored - 1)) : 0;
  const bool invert = m.photometric == "MONOCHROME1";
  std::vector<uint8_t> level_of_word(words);
  for (size_t w = 0; w < words; ++w) {
    const double mv = mv_of_word[w];
    double y = 0;
    switch (rule) {
      case Rule::full_range:
        y = full_range_value(static_cast<double>(sv_of_word[w] - smallest), m.bits_stored);
        break;
      case Rule::window:
        y = function == VoiFunction::linear         ? linear_window_value(mv, centre, width)
            : function == VoiFunction::linear_exact ? linear_exact_window_value(mv, centre, width)
                                                    : sigmoid_window_value(mv, centre, width);
        break;
      case Rule::range:
        y = range_value(mv, low, high);
        break;
      case Rule::lut:
        y = lut_value(*lut, mv) * 255.0 / (std::ldexp(1.0, lut->bits) - 1.0);
        break;
    }
    const uint8_t level = round_level(y);
    level_of_word[w] = invert ? static_cast<uint8_t>(255 - level) : level;
  }

  DecodedImage out;
  out.width = m.columns;
  out.height = m.rows;
  out.channels = 1;
  out.pixels.resize(pixels);
  if (m.bits_allocated == 8) {
    for (size_t i = 0; i < pixels; ++i) out.pixels[i] = level_of_word[frame[i]];
  } else {
    for (size_t i = 0; i < pixels; ++i) {
      uint16_t word;
      std::memcpy(&word, frame + 2 * i, 2);  // little-endian words on a little-endian host
      out.pixels[i] = level_of_word[word];
    }
  }
  return out;
}

}  // namespace vitpipe
