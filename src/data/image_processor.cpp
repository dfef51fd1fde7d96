#include "data/image_processor.h"

#include <vector>

#include "util/error.h"

namespace vitpipe {
namespace {
constexpr size_t kKeepScratchBytes = size_t{64} << 20;  // per-thread resize buffer kept between calls
}  // namespace

float preprocess_value(uint8_t value, int channel, const PreprocessorConfig& config) {
  // rescale: numpy multiplies in float64 (transformers upcasts first), then casts to float32.
  float x = config.do_rescale ? static_cast<float>(static_cast<double>(value) * config.rescale_factor)
                              : static_cast<float>(value);
  if (config.do_normalize) {
    // normalize: mean and std become float32 arrays; subtraction and division are float32 operations.
    const float mean = static_cast<float>(config.image_mean[static_cast<size_t>(channel)]);
    const float std = static_cast<float>(config.image_std[static_cast<size_t>(channel)]);
    x = (x - mean) / std;
  }
  return x;
}

ImageProcessor::ImageProcessor(const PreprocessorConfig& config)
    : config_(config), filter_(resample_filter_from_pil(config.resample)) {
  if (config_.do_resize) {
    VP_REQUIRE(config_.height > 0 && config_.width > 0, "preprocessor config: size must be positive, got ",
               config_.height, "x", config_.width);
  }
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) table_[c][v] = preprocess_value(static_cast<uint8_t>(v), c, config_);
  }
}

void ImageProcessor::normalize(const uint8_t* pixels, int channels, int64_t count, float* out_chw) const {
  for (int c = 0; c < 3; ++c) {
    const float* table = table_[c].data();
    float* dst = out_chw + c * count;
    if (channels == 1) {
      for (int64_t i = 0; i < count; ++i) dst[i] = table[pixels[i]];
    } else {
      for (int64_t i = 0; i < count; ++i) dst[i] = table[pixels[3 * i + c]];
    }
  }
}

void ImageProcessor::process(const DecodedImage& image, float* out_chw) const {
  VP_REQUIRE(image.channels == 1 || image.channels == 3, "image processor: expected 1 or 3 channels, got ",
             image.channels);
  VP_REQUIRE(image.width > 0 && image.height > 0, "image processor: empty image");
  const int64_t height = output_height(image.height);
  const int64_t width = output_width(image.width);
  if (height == image.height && width == image.width) {  // no resize, or Pillow's resize would copy
    normalize(image.pixels.data(), image.channels, height * width, out_chw);
    return;
  }
  thread_local std::vector<uint8_t> resized;
  resized.resize(static_cast<size_t>(height * width * image.channels));
  resize_like_pillow(image.pixels.data(), image.width, image.height, image.channels, resized.data(), width, height,
                     filter_);
  normalize(resized.data(), image.channels, height * width, out_chw);
  if (resized.capacity() > kKeepScratchBytes) std::vector<uint8_t>().swap(resized);
}

void ImageProcessor::process(const RgbImage& image, float* out_chw) const {
  VP_REQUIRE(image.width > 0 && image.height > 0, "image processor: empty image");
  const int64_t height = output_height(image.height);
  const int64_t width = output_width(image.width);
  if (height == image.height && width == image.width) {
    normalize(image.pixels.data(), 3, height * width, out_chw);
    return;
  }
  thread_local std::vector<uint8_t> resized;
  resized.resize(static_cast<size_t>(height * width * 3));
  resize_like_pillow(image.pixels.data(), image.width, image.height, 3, resized.data(), width, height, filter_);
  normalize(resized.data(), 3, height * width, out_chw);
  if (resized.capacity() > kKeepScratchBytes) std::vector<uint8_t>().swap(resized);
}

void ImageProcessor::process_file(const std::filesystem::path& path, float* out_chw) const {
  process(decode_image_file_keep_gray(path, image_read_options_of(config_, "preprocessor config")), out_chw);
}

void preprocess_image(const RgbImage& image, const PreprocessorConfig& config, float* out_chw) {
  ImageProcessor(config).process(image, out_chw);
}

void preprocess_image(const DecodedImage& image, const PreprocessorConfig& config, float* out_chw) {
  ImageProcessor(config).process(image, out_chw);
}

Tensor preprocess_batch(const std::vector<DecodedImage>& images, const PreprocessorConfig& config) {
  const ImageProcessor processor(config);
  VP_REQUIRE(!images.empty(), "preprocess_batch: no images");
  const int64_t height = processor.output_height(images.front().height);
  const int64_t width = processor.output_width(images.front().width);
  for (const DecodedImage& image : images) {
    VP_REQUIRE(processor.output_height(image.height) == height && processor.output_width(image.width) == width,
               "preprocess_batch: images of different sizes (", image.width, "x", image.height, " vs ",
               images.front().width, "x", images.front().height, ") and do_resize is off");
  }
  const int64_t n = static_cast<int64_t>(images.size());
  Tensor batch = Tensor::empty({n, 3, height, width});
  float* data = batch.f32();
  std::vector<std::string> errors(images.size());
#pragma omp parallel for schedule(dynamic)
  for (int64_t i = 0; i < n; ++i) {
    try {
      processor.process(images[static_cast<size_t>(i)], data + i * 3 * height * width);
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(i)] = e.what();
    }
  }
  for (size_t i = 0; i < errors.size(); ++i) {
    VP_REQUIRE(errors[i].empty(), "preprocess_batch: image ", i, ": ", errors[i]);
  }
  return batch;
}

}  // namespace vitpipe
