#include "data/image_processor.h"

#include <algorithm>
#include <cstring>
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

void center_crop_pixels(const uint8_t* pixels, int64_t width, int64_t height, int channels, int64_t crop_width,
                        int64_t crop_height, uint8_t* out) {
  // transformers: top = (h - crop_h) // 2 when the crop fits; otherwise the image sits centred in a zero canvas
  // (top_pad = ceil((crop_h - h) / 2)), which is a source offset of -top_pad.
  auto offset = [](int64_t size, int64_t crop) { return size >= crop ? (size - crop) / 2 : -((crop - size + 1) / 2); };
  const int64_t top = offset(height, crop_height), left = offset(width, crop_width);
  const size_t row_bytes = static_cast<size_t>(crop_width * channels);
  for (int64_t y = 0; y < crop_height; ++y) {
    uint8_t* dst = out + static_cast<size_t>(y) * row_bytes;
    const int64_t sy = y + top;
    if (sy < 0 || sy >= height) {
      std::memset(dst, 0, row_bytes);
      continue;
    }
    const uint8_t* src = pixels + static_cast<size_t>(sy * width * channels);
    const int64_t x0 = std::max<int64_t>(0, -left), x1 = std::min(crop_width, width - left);
    if (x0 > 0) std::memset(dst, 0, static_cast<size_t>(x0 * channels));
    if (x1 > x0)
      std::memcpy(dst + x0 * channels, src + (x0 + left) * channels, static_cast<size_t>((x1 - x0) * channels));
    if (x1 < crop_width)
      std::memset(dst + std::max(x1, x0) * channels, 0,
                  static_cast<size_t>((crop_width - std::max(x1, x0)) * channels));
  }
}

ImageProcessor::ImageProcessor(const PreprocessorConfig& config)
    : config_(config), filter_(resample_filter_from_pil(config.resample)) {
  if (config_.do_resize) {
    if (config_.resize_mode == ResizeMode::exact) {
      VP_REQUIRE(config_.height > 0 && config_.width > 0, "preprocessor config: size must be positive, got ",
                 config_.height, "x", config_.width);
    } else {
      VP_REQUIRE(config_.shortest_edge > 0, "preprocessor config: size.shortest_edge must be positive, got ",
                 config_.shortest_edge);
    }
  }
  if (config_.do_center_crop) {
    VP_REQUIRE(config_.crop_height > 0 && config_.crop_width > 0, "preprocessor config: crop_size must be positive");
  }
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) table_[c][v] = preprocess_value(static_cast<uint8_t>(v), c, config_);
  }
}

int64_t ImageProcessor::output_height(int64_t input_width, int64_t input_height) const {
  if (config_.do_center_crop) return config_.crop_height;
  return config_.resized_size(input_width, input_height).second;
}

int64_t ImageProcessor::output_width(int64_t input_width, int64_t input_height) const {
  if (config_.do_center_crop) return config_.crop_width;
  return config_.resized_size(input_width, input_height).first;
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

void ImageProcessor::geometry(const uint8_t* pixels, int64_t width, int64_t height, int channels,
                              std::vector<uint8_t>* out, int64_t* out_width, int64_t* out_height,
                              size_t padding) const {
  VP_REQUIRE(channels == 1 || channels == 3, "image processor: expected 1 or 3 channels, got ", channels);
  VP_REQUIRE(width > 0 && height > 0, "image processor: empty image");
  const auto [rw, rh] = config_.resized_size(width, height);
  const bool crop = config_.do_center_crop;
  const int64_t ow = crop ? config_.crop_width : rw, oh = crop ? config_.crop_height : rh;
  out->resize(static_cast<size_t>(ow * oh * channels) + padding);
  *out_width = ow;
  *out_height = oh;
  if (!crop) {
    if (rw == width && rh == height) {  // no resize, or Pillow's resize would copy
      std::memcpy(out->data(), pixels, static_cast<size_t>(ow * oh * channels));
    } else {
      resize_like_pillow(pixels, width, height, channels, out->data(), rw, rh, filter_);
    }
    return;
  }
  if (rw == width && rh == height) {
    center_crop_pixels(pixels, width, height, channels, ow, oh, out->data());
    return;
  }
  thread_local std::vector<uint8_t> resized;
  resized.resize(static_cast<size_t>(rw * rh * channels));
  resize_like_pillow(pixels, width, height, channels, resized.data(), rw, rh, filter_);
  center_crop_pixels(resized.data(), rw, rh, channels, ow, oh, out->data());
  if (resized.capacity() > kKeepScratchBytes) std::vector<uint8_t>().swap(resized);
}

void ImageProcessor::process_pixels(const uint8_t* pixels, int64_t width, int64_t height, int channels,
                                    float* out_chw) const {
  const auto [rw, rh] = config_.resized_size(width, height);
  if (!config_.do_center_crop && rw == width && rh == height) {
    normalize(pixels, channels, width * height, out_chw);
    return;
  }
  thread_local std::vector<uint8_t> processed;
  int64_t ow = 0, oh = 0;
  geometry(pixels, width, height, channels, &processed, &ow, &oh);
  normalize(processed.data(), channels, ow * oh, out_chw);
  if (processed.capacity() > kKeepScratchBytes) std::vector<uint8_t>().swap(processed);
}

void ImageProcessor::process(const DecodedImage& image, float* out_chw) const {
  VP_REQUIRE(image.channels == 1 || image.channels == 3, "image processor: expected 1 or 3 channels, got ",
             image.channels);
  VP_REQUIRE(image.width > 0 && image.height > 0, "image processor: empty image");
  process_pixels(image.pixels.data(), image.width, image.height, image.channels, out_chw);
}

void ImageProcessor::process(const RgbImage& image, float* out_chw) const {
  VP_REQUIRE(image.width > 0 && image.height > 0, "image processor: empty image");
  process_pixels(image.pixels.data(), image.width, image.height, 3, out_chw);
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
  const DecodedImage& first = images.front();
  const int64_t height = processor.output_height(first.width, first.height);
  const int64_t width = processor.output_width(first.width, first.height);
  for (const DecodedImage& image : images) {
    VP_REQUIRE(processor.output_height(image.width, image.height) == height &&
                   processor.output_width(image.width, image.height) == width,
               "preprocess_batch: images of different sizes (", image.width, "x", image.height, " vs ", first.width,
               "x", first.height, ") and the preprocessing does not give them one size");
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
