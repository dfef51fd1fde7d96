// preprocessor_config.json of a ViTImageProcessor: how a checkpoint expects its pixels.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace vitpipe {

struct PreprocessorConfig {
  bool do_resize = true;
  int64_t height = 224;  // `size` is an int in old files, {"height": h, "width": w} in new ones
  int64_t width = 224;
  int resample = 2;  // PIL filter id: 0 nearest, 1 lanczos, 2 bilinear, 3 bicubic, 4 box, 5 hamming
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<double, 3> image_mean{0.5, 0.5, 0.5};
  std::array<double, 3> image_std{0.5, 0.5, 0.5};
  std::string image_processor_type = "ViTImageProcessor";
  // DeiT's processor (facebook/deit-*): resize to `size`, then a centred crop of crop_height x crop_width.
  // ViTImageProcessor never crops.
  bool do_center_crop = false;
  int64_t crop_height = 224;
  int64_t crop_width = 224;
  // vitpipe's own key "vitpipe_intensity" (transformers ignores unknown keys): how image files were turned into
  // 8-bit pixels for this model, {"intensity": ..., "dicom_window": ...} (data/image_read_options.h reads it). Null
  // when absent.
  nlohmann::json vitpipe_intensity;
};

// ViTImageProcessor's defaults (resize to image_size x image_size, bilinear, 1/255, mean = std = 0.5): what
// transformers uses when a checkpoint has no preprocessor_config.json.
PreprocessorConfig default_preprocessor_config(int64_t image_size);

// Accepts the old form ("size": 224, "feature_extractor_type") and the new one ("size": {"height", "width"} or
// {"shortest_edge": n}, read as n x n), image_mean/image_std as 3 numbers, one number or a 1-element list
// (broadcast). Absent fields take ViTImageProcessor's defaults. Throws vitpipe::Error naming `source` and the field.
PreprocessorConfig parse_preprocessor_config_text(const std::string& text, const std::string& source);
PreprocessorConfig read_preprocessor_config(const std::filesystem::path& path);

// The modern form: "size": {"height", "width"}, "image_processor_type": "ViTImageProcessor" (or
// "DeiTImageProcessor" with crop_size when do_center_crop is set), keys sorted, indent 2.
std::string preprocessor_config_text(const PreprocessorConfig& config);
void write_preprocessor_config(const std::filesystem::path& path, const PreprocessorConfig& config);

}  // namespace vitpipe
