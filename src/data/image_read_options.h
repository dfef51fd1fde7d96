// How a file's samples become the 8-bit pixels the image processor sees, for sources above 8 bits (16-bit gray PNG,
// DICOM) and the DICOM-specific choices. A model records them in its preprocessor_config.json (key
// "vitpipe_intensity", next to transformers' keys) and a packed cache in its manifest and fingerprint, so predict,
// eval and training read a file the same way.
//
//   --intensity auto            (default) 8-bit sources unchanged; a gray PNG above 8 bits full-range (with one
//                               warning: Pillow and transformers' processor clip it instead); DICOM by its own VOI
//                               transform as --dicom-window says
//   --intensity pillow          Pillow's convert("RGB"): 16-bit gray clipped to 0..255 (PNG only)
//   --intensity full-range      value * 255 / (2^bits - 1), rounded (DICOM: the stored value above its minimum,
//                               bits = Bits Stored)
//   --intensity window:C,W      the linear window of DICOM PS3.3 C.11.2.1.2.1 with centre C and width W over the
//                               PNG's values or the DICOM's modality values
//   --intensity percentile:L,H  per image, numpy.percentile's L-th and H-th percentiles of those values mapped
//                               linearly onto 0..255
//   --dicom-window first|N|minmax   which VOI transform of a DICOM file `auto` applies: the first (window, else VOI
//                               LUT, else min..max), the N-th (1-based, windows before VOI LUTs), or min..max
//   --dicom-first-frame         a multi-frame DICOM gives its first frame instead of being refused
// The exact rule, step by step, is in data/dicom_pixels.h and data/intensity_mapping.h; 8-bit PNG, JPEG and colour
// images are never changed by these options.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "io/preprocessor_config.h"

namespace vitpipe {

enum class IntensityKind { automatic, pillow, full_range, window, percentile };

struct IntensityPolicy {
  IntensityKind kind = IntensityKind::automatic;
  double first = 0;   // window: centre; percentile: low percentile (0..100)
  double second = 0;  // window: width; percentile: high percentile

  bool operator==(const IntensityPolicy&) const = default;
};

// "auto", "pillow", "full-range", "window:C,W", "percentile:L,H". Throws naming `where` and the expectation.
IntensityPolicy parse_intensity_policy(std::string_view text, const std::string& where);
std::string intensity_policy_name(const IntensityPolicy& policy);  // parses back to the same policy

enum class DicomWindowKind { first, index, minmax };

struct DicomWindowChoice {
  DicomWindowKind kind = DicomWindowKind::first;
  int index = 1;  // kind == index: 1-based position among the file's windows, then its VOI LUTs

  bool operator==(const DicomWindowChoice&) const = default;
};

DicomWindowChoice parse_dicom_window(std::string_view text, const std::string& where);  // "first", "minmax", "2"
std::string dicom_window_name(const DicomWindowChoice& choice);

struct ImageReadOptions {
  IntensityPolicy intensity;
  DicomWindowChoice dicom_window;
  bool dicom_first_frame = false;

  bool operator==(const ImageReadOptions&) const = default;
};

std::string describe_image_read_options(const ImageReadOptions& options);  // "intensity auto, dicom window first"

// {"intensity": "auto", "dicom_window": "first"} (+ "dicom_first_frame": true when set): the form stored in
// preprocessor_config.json and in a packed cache's manifest.
nlohmann::json image_read_options_json(const ImageReadOptions& options);
// Reads that form; absent keys take the defaults. Throws naming `where` and the key.
ImageReadOptions parse_image_read_options_json(const nlohmann::json& value, const std::string& where);

// The options a model's preprocessor config records ("vitpipe_intensity"; the defaults when absent).
ImageReadOptions image_read_options_of(const PreprocessorConfig& config, const std::string& source);

}  // namespace vitpipe
