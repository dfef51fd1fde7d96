// transformers' ViTImageProcessor, DeiTImageProcessor and BitImageProcessor, bit for bit: an 8-bit RGB image ->
// float32 [3, H, W] pixel_values.
//
// The reference (transformers.image_transforms and each processor's preprocess), per image:
//   resize:    to PIL, Image.resize((width, height), resample) -> uint8              (data/pillow_resize.h); the
//              size is fixed, or (BitImageProcessor) the shortest edge to S and the other int(S * long / short)
//   crop:      DeiT, Bit: center_crop on the uint8 array, top = (h - crop_h) // 2, left = (w - crop_w) // 2
//              (an image smaller than the crop is first padded with zeros, centred, as transformers does)
//   rescale:   (image.astype(float64) * rescale_factor).astype(float32)
//   normalize: (image - mean) / std, in float32, mean/std cast to float32 arrays (uint8 is first cast to float32
//              when rescale is off)
//   then channels first.
// Every step after the resize and crop is a function of one uint8 value and its channel, so it is a 3 x 256 table
// computed with exactly that formula: the table lookup equals the formula bit for bit.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "data/image.h"
#include "data/pillow_resize.h"
#include "io/preprocessor_config.h"
#include "tensor/tensor.h"

namespace vitpipe {

// The formula itself, for one value of one channel (the table is built from it; tests compare it with numpy).
float preprocess_value(uint8_t value, int channel, const PreprocessorConfig& config);

class ImageProcessor {
 public:
  explicit ImageProcessor(const PreprocessorConfig& config);  // throws on a bad size or resample id

  const PreprocessorConfig& config() const { return config_; }
  // Output size for an input of width x height: the crop, the resize, or the input's own size.
  int64_t output_height(int64_t input_width, int64_t input_height) const;
  int64_t output_width(int64_t input_width, int64_t input_height) const;

  // Writes 3 * output_height * output_width floats, channel-major. Gray images (channels == 1) are resized once and
  // replicated, which equals processing their RGB expansion.
  void process(const DecodedImage& image, float* out_chw) const;
  void process(const RgbImage& image, float* out_chw) const;

  // The resized and cropped uint8 pixels (1 or 3 interleaved channels, as the input), before rescale/normalise:
  // what a packed cache stores and augmentation starts from. `out` is resized to fit, plus `padding` bytes.
  void geometry(const uint8_t* pixels, int64_t width, int64_t height, int channels, std::vector<uint8_t>* out,
                int64_t* out_width, int64_t* out_height, size_t padding = 0) const;

  // Decode a PNG/JPEG file and process it (gray files stay gray until the last step).
  void process_file(const std::filesystem::path& path, float* out_chw) const;

  float table_value(int channel, uint8_t value) const { return table_[channel][value]; }

 private:
  void normalize(const uint8_t* pixels, int channels, int64_t count, float* out_chw) const;
  void process_pixels(const uint8_t* pixels, int64_t width, int64_t height, int channels, float* out_chw) const;

  PreprocessorConfig config_;
  ResampleFilter filter_;
  std::array<std::array<float, 256>, 3> table_{};
};

// transformers' center_crop on an interleaved uint8 image (zero padding where the crop is larger).
void center_crop_pixels(const uint8_t* pixels, int64_t width, int64_t height, int channels, int64_t crop_width,
                        int64_t crop_height, uint8_t* out);

// Convenience wrappers (they rebuild the 768-entry table per call; use ImageProcessor in loops).
void preprocess_image(const RgbImage& image, const PreprocessorConfig& config, float* out_chw);
void preprocess_image(const DecodedImage& image, const PreprocessorConfig& config, float* out_chw);

// [N, 3, H, W] float32 for a batch; all outputs must have the same size (a fixed resize or crop, or equal inputs).
// Images are processed in parallel with OpenMP.
Tensor preprocess_batch(const std::vector<DecodedImage>& images, const PreprocessorConfig& config);

}  // namespace vitpipe
