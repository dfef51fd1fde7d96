// DICOM pixel values -> the 8-bit image vitpipe feeds to the processor: the reference rule, implemented here and,
// independently, in tests/image/dicom_reference.py (with pydicom), which must agree on every pixel.
//
// Gray images (MONOCHROME1 / MONOCHROME2), per pixel:
//  1. stored value sv: the Bits Allocated word (little-endian), shifted right by High Bit + 1 - Bits Stored, its low
//     Bits Stored bits kept, sign-extended when Pixel Representation is 1.
//  2. modality value mv (PS3.3 C.11.1): a Modality LUT Sequence when present (the LUT rule below), else
//     sv * Rescale Slope + Rescale Intercept (absent: 1 and 0).
//  3. a level in [0, 255] by the intensity policy (data/image_read_options.h):
//     auto -> the file's VOI transform chosen by --dicom-window among its windows (Window Center / Width, in order,
//       with VOI LUT Function LINEAR, LINEAR_EXACT or SIGMOID: data/intensity_mapping.h) and then its VOI LUT
//       Sequence items; `first` falls back to min..max when the file has neither. min..max is DCMTK's
//       --min-max-window: the LINEAR window with centre (min + max + 1) / 2 and width max - min + 1 over the modality
//       values present in the image, so min -> 0 and max -> 255.
//     window:C,W -> LINEAR window C, W over mv;  percentile:L,H -> range_value over numpy's percentiles of mv;
//     full-range -> full_range_value(sv - smallest storable value, Bits Stored);  pillow -> refused (Pillow does not
//     read DICOM).
//     A LUT (LUT Descriptor = entries n (0 means 65536), first input value f, bits b; LUT Data): the entry
//     clamp(floor(x) - f, 0, n - 1); for the VOI LUT its value * 255 / (2^b - 1) is the level's y.
//  4. level = floor(y + 0.5) clamped to 0..255; MONOCHROME1 (white = low values) is inverted last: 255 - level.
// Every level depends on sv alone (with the image's min, max or percentiles), so it is a table over the 2^16
// possible words: one lookup per pixel.
//
// Colour images (RGB, or YBR_* that the codec decoded to RGB) of 8 bits are taken as they are, planar
// configuration 1 (RRR..GGG..BBB) interleaved; no VOI applies to colour (PS3.3 C.11.2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/image_read_options.h"

namespace vitpipe {

enum class VoiFunction { linear, linear_exact, sigmoid };

struct DicomWindow {
  double centre = 0;
  double width = 0;
};

struct DicomLut {
  int64_t entries = 0;      // n (1..65536)
  int64_t first_input = 0;  // f
  int bits = 16;            // b
  std::vector<uint16_t> data;
};

// What the rule needs of a file's Image Pixel, Modality LUT and VOI LUT modules (validated by the reader).
struct DicomPixelModule {
  int64_t rows = 0, columns = 0;
  int samples_per_pixel = 1;
  std::string photometric;  // MONOCHROME1, MONOCHROME2, RGB (after decoding)
  int bits_allocated = 16;  // 8 or 16
  int bits_stored = 12;
  int high_bit = 11;
  bool is_signed = false;
  int planar_configuration = 0;
  double rescale_slope = 1.0, rescale_intercept = 0.0;
  std::optional<DicomLut> modality_lut;
  std::vector<DicomWindow> windows;
  VoiFunction voi_function = VoiFunction::linear;
  std::vector<DicomLut> voi_luts;

  bool gray() const { return samples_per_pixel == 1; }
};

// One frame's pixel bytes (rows * columns * samples * bits_allocated / 8, little-endian words) -> the 8-bit image.
// Throws naming `name` when the options ask for what the file does not have (a 3rd window of a file with one,
// --intensity pillow).
DecodedImage dicom_frame_to_image(const uint8_t* frame, const DicomPixelModule& module, const ImageReadOptions& options,
                                  const std::string& name);

}  // namespace vitpipe
