// preprocessor_config.json of a ViTImageProcessor, DeiTImageProcessor or BitImageProcessor (DINOv2, RAD-DINO): how a
// checkpoint expects its pixels. Per image: resize (to height x width, or the shortest edge to `shortest_edge` with
// the aspect kept), centre crop (DeiT, Bit), rescale, normalise.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace vitpipe {

enum class ResizeMode {
  exact,          // to height x width
  shortest_edge,  // BitImageProcessor: the shorter side to shortest_edge, the longer int(shortest * long / short)
};

struct PreprocessorConfig {
  bool do_resize = true;
  ResizeMode resize_mode = ResizeMode::exact;
  int64_t height = 224;  // `size` is an int in old files, {"height": h, "width": w} in new ones
  int64_t width = 224;
  int64_t shortest_edge = 0;  // ResizeMode::shortest_edge
  int resample = 2;           // PIL filter id: 0 nearest, 1 lanczos, 2 bilinear, 3 bicubic, 4 box, 5 hamming
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<double, 3> image_mean{0.5, 0.5, 0.5};
  std::array<double, 3> image_std{0.5, 0.5, 0.5};
  bool do_convert_rgb = true;  // BitImageProcessor's flag (written back; vitpipe always decodes to RGB)
  std::string image_processor_type = "ViTImageProcessor";
  // DeiT's and Bit's processors: after the resize, a centred crop of crop_height x crop_width (top =
  // (h - crop_h) // 2, left = (w - crop_w) // 2, as transformers' center_crop). ViTImageProcessor never crops.
  bool do_center_crop = false;
  int64_t crop_height = 224;
  int64_t crop_width = 224;

  // The resized size of a width x height input (the input's own when !do_resize), as {width, height}.
  std::pair<int64_t, int64_t> resized_size(int64_t input_width, int64_t input_height) const;
  // What the model sees: the crop, or the exact resize; 0 x 0 when it depends on the input (shortest-edge resize
  // without a crop, or no resize), as {width, height}.
  std::pair<int64_t, int64_t> fixed_output_size() const;
  // One line naming the geometry, e.g. "resize shortest edge 256 bicubic, crop 224x224": what a packed cache
  // records and compares.
  std::string geometry() const;
  // vitpipe's own key "vitpipe_intensity" (transformers ignores unknown keys): how image files were turned into
  // 8-bit pixels for this model, {"intensity": ..., "dicom_window": ...} (data/image_read_options.h reads it). Null
  // when absent.
  nlohmann::json vitpipe_intensity;
};

// ViTImageProcessor's defaults (resize to image_size x image_size, bilinear, 1/255, mean = std = 0.5): what
// transformers uses when a checkpoint has no preprocessor_config.json.
PreprocessorConfig default_preprocessor_config(int64_t image_size);

// Accepts the old form ("size": 224, "feature_extractor_type") and the new one ("size": {"height", "width"} or
// {"shortest_edge": n}: for a BitImageProcessor the shortest edge, for ViT/DeiT read as n x n), image_mean/image_std
// as 3 numbers, one number or a 1-element list (broadcast). Absent fields take the processor class's defaults.
// Throws vitpipe::Error naming `source` and the field, e.g. for a crop larger than the resize.
PreprocessorConfig parse_preprocessor_config_text(const std::string& text, const std::string& source);
PreprocessorConfig read_preprocessor_config(const std::filesystem::path& path);

// The modern form, keys sorted, indent 2: "size": {"height", "width"} (Bit: {"shortest_edge"}),
// "image_processor_type" as read (ViTImageProcessor, DeiTImageProcessor when it crops, BitImageProcessor).
std::string preprocessor_config_text(const PreprocessorConfig& config);
void write_preprocessor_config(const std::filesystem::path& path, const PreprocessorConfig& config);

// The same preprocessing for another model input size `image_size`: the crop (or exact size) becomes
// image_size, the resize keeps its ratio to it (DeiT 256 -> 224, DINOv2 256 -> 224).
PreprocessorConfig preprocessor_for_image_size(const PreprocessorConfig& config, int64_t image_size);

}  // namespace vitpipe
