// Image layer checks that need no Python: error handling, gray/RGB equivalences, batching, thread safety.
// The bit-exact comparisons with Pillow and numpy are in test_pillow_reference.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/image_processor.h"
#include "data/jpeg_decoder.h"
#include "data/pillow_resize.h"
#include "data/png_decoder.h"
#include "util/error.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

const fs::path kXray = fs::path(VITPIPE_SOURCE_DIR) / "tests" / "fixtures" / "images" / "00000013_003.png";
const fs::path kRgba = fs::path(VITPIPE_SOURCE_DIR) / "tests" / "fixtures" / "images" / "00000004_000.png";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

DecodedImage random_image(int64_t width, int64_t height, int channels, uint64_t seed) {
  DecodedImage image;
  image.width = width;
  image.height = height;
  image.channels = channels;
  image.pixels.resize(static_cast<size_t>(width * height * channels));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint8_t& p : image.pixels) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    p = static_cast<uint8_t>(state >> 24);
  }
  return image;
}

TEST(ImageDecode, RealXrayStaysGrayAndExpandsToRgb) {
  const DecodedImage gray = decode_image_file_keep_gray(kXray);
  EXPECT_EQ(gray.width, 1024);
  EXPECT_EQ(gray.height, 1024);
  EXPECT_EQ(gray.channels, 1);
  const RgbImage rgb = decode_image_file(kXray);
  ASSERT_EQ(rgb.pixels.size(), 1024u * 1024u * 3u);
  for (size_t i = 0; i < gray.pixels.size(); i += 977) {
    EXPECT_EQ(rgb.pixels[3 * i], gray.pixels[i]);
    EXPECT_EQ(rgb.pixels[3 * i + 1], gray.pixels[i]);
    EXPECT_EQ(rgb.pixels[3 * i + 2], gray.pixels[i]);
  }
}

TEST(ImageDecode, RgbaDropsAlpha) {
  const DecodedImage image = decode_image_file_keep_gray(kRgba);
  EXPECT_EQ(image.channels, 3);
  EXPECT_EQ(image.pixels.size(), 64u * 64u * 3u);
}

TEST(ImageDecode, MissingAndUnreadableFilesNameThePath) {
  EXPECT_NE(error_of([] { decode_image_file("/nonexistent/x.png"); }).find("/nonexistent/x.png"), std::string::npos);
  const std::string dir = fs::temp_directory_path().string();
  EXPECT_NE(error_of([&] { decode_image_file(dir); }).find("not a regular file"), std::string::npos);
}

TEST(ImageDecode, BadMemoryInputsAreRefused) {
  const uint8_t nothing[1] = {0};
  EXPECT_NE(error_of([&] { decode_image_memory(nothing, 0, "a.png"); }).find("a.png: empty file"), std::string::npos);
  const uint8_t text[] = "hello world";
  EXPECT_NE(error_of([&] { decode_image_memory(text, sizeof text, "b.png"); }).find("not a PNG or JPEG"),
            std::string::npos);
  EXPECT_FALSE(has_png_signature(text, sizeof text));
  EXPECT_FALSE(has_jpeg_signature(text, sizeof text));
  EXPECT_THROW(decode_png(text, sizeof text, "c.png"), Error);
  EXPECT_THROW(decode_jpeg(text, sizeof text, "c.jpg"), Error);
}

TEST(ImageDecode, ToRgbAndBack) {
  DecodedImage gray = random_image(5, 3, 1, 1);
  const RgbImage rgb = to_rgb(gray);
  ASSERT_EQ(rgb.pixels.size(), 45u);
  EXPECT_EQ(rgb.pixels[3 * 7 + 2], gray.pixels[7]);
  const DecodedImage back = to_decoded(rgb);
  EXPECT_EQ(back.channels, 3);
  EXPECT_EQ(back.pixels, rgb.pixels);
  DecodedImage color = random_image(4, 4, 3, 2);
  const uint8_t* buffer = color.pixels.data();
  const RgbImage moved = to_rgb(std::move(color));
  EXPECT_EQ(moved.pixels.data(), buffer);  // no copy
}

TEST(PillowResize, FilterIds) {
  EXPECT_EQ(resample_filter_from_pil(2), ResampleFilter::bilinear);
  EXPECT_EQ(resample_filter_name(ResampleFilter::bicubic), "bicubic");
  EXPECT_NE(error_of([] { resample_filter_from_pil(6); }).find("not a PIL filter"), std::string::npos);
  EXPECT_THROW(resample_filter_from_pil(-1), Error);
}

TEST(PillowResize, RefusesBadArguments) {
  const DecodedImage image = random_image(8, 8, 1, 3);
  std::vector<uint8_t> out(64 * 2);
  EXPECT_THROW(resize_like_pillow(image.pixels.data(), 8, 8, 2, out.data(), 8, 8, ResampleFilter::bilinear), Error);
  EXPECT_THROW(resize_like_pillow(image.pixels.data(), 8, 8, 1, out.data(), 0, 8, ResampleFilter::bilinear), Error);
  EXPECT_THROW(resize_like_pillow(image.pixels.data(), 0, 8, 1, out.data(), 4, 4, ResampleFilter::bilinear), Error);
}

TEST(PillowResize, SameSizeIsACopy) {
  const DecodedImage image = random_image(9, 7, 3, 4);
  for (int f = 0; f <= 5; ++f) {
    EXPECT_EQ(resize_like_pillow(image, 9, 7, resample_filter_from_pil(f)).pixels, image.pixels);
  }
}

TEST(PillowResize, ConstantImagesStayConstant) {
  // Normalised weights sum to 1 in fixed point up to rounding; Pillow's rounding bias keeps constants exact.
  for (int value : {0, 1, 127, 254, 255}) {
    DecodedImage image;
    image.width = 37;
    image.height = 23;
    image.channels = 1;
    image.pixels.assign(37 * 23, static_cast<uint8_t>(value));
    for (int f : {1, 2, 3, 4, 5}) {
      const DecodedImage out = resize_like_pillow(image, 224, 100, resample_filter_from_pil(f));
      for (uint8_t p : out.pixels) ASSERT_EQ(p, value) << "filter " << f;
    }
  }
}

TEST(PillowResize, GrayEqualsEachChannelOfRgb) {
  const DecodedImage gray = random_image(61, 47, 1, 5);
  const DecodedImage rgb = to_decoded(to_rgb(gray));
  for (int f = 0; f <= 5; ++f) {
    const DecodedImage a = resize_like_pillow(gray, 29, 80, resample_filter_from_pil(f));
    const DecodedImage b = resize_like_pillow(rgb, 29, 80, resample_filter_from_pil(f));
    EXPECT_EQ(to_rgb(a).pixels, b.pixels) << "filter " << f;
  }
}

TEST(PillowResize, ThreadsShareTheCacheSafely) {
  const DecodedImage image = random_image(300, 200, 3, 6);
  const DecodedImage serial = resize_like_pillow(image, 224, 224, ResampleFilter::bilinear);
  std::vector<DecodedImage> results(16);
#pragma omp parallel for
  for (int i = 0; i < 16; ++i) {
    // Different output sizes race to fill the table cache; size 224 must still equal the serial result.
    resize_like_pillow(image, 100 + i, 224, ResampleFilter::bicubic);
    results[static_cast<size_t>(i)] = resize_like_pillow(image, 224, 224, ResampleFilter::bilinear);
  }
  for (const auto& r : results) EXPECT_EQ(r.pixels, serial.pixels);
}

TEST(ImageProcessor, TableEqualsFormula) {
  PreprocessorConfig config;
  config.image_mean = {0.485, 0.456, 0.406};
  config.image_std = {0.229, 0.224, 0.225};
  const ImageProcessor processor(config);
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      const float formula = (static_cast<float>(v * (1.0 / 255.0)) - static_cast<float>(config.image_mean[c])) /
                            static_cast<float>(config.image_std[c]);
      EXPECT_EQ(processor.table_value(c, static_cast<uint8_t>(v)), formula);
      EXPECT_EQ(preprocess_value(static_cast<uint8_t>(v), c, config), formula);
    }
  }
  EXPECT_EQ(processor.table_value(0, 255), (1.0f - 0.485f) / 0.229f);
}

TEST(ImageProcessor, RefusesBadConfigs) {
  PreprocessorConfig config;
  config.resample = 9;
  EXPECT_NE(error_of([&] { ImageProcessor p(config); }).find("not a PIL filter"), std::string::npos);
  config.resample = 2;
  config.height = 0;
  EXPECT_NE(error_of([&] { ImageProcessor p(config); }).find("size must be positive"), std::string::npos);
  config.do_resize = false;  // size unused then
  EXPECT_NO_THROW(ImageProcessor p(config));
}

TEST(ImageProcessor, GrayPathEqualsRgbPath) {
  PreprocessorConfig config;
  const ImageProcessor processor(config);
  const DecodedImage gray = random_image(300, 257, 1, 7);
  std::vector<float> a(3 * 224 * 224), b(3 * 224 * 224);
  processor.process(gray, a.data());
  processor.process(to_rgb(gray), b.data());
  EXPECT_EQ(a, b);
  preprocess_image(to_rgb(gray), config, b.data());
  EXPECT_EQ(a, b);
}

TEST(ImageProcessor, BatchStacksImages) {
  PreprocessorConfig config;
  config.height = 32;
  config.width = 48;
  std::vector<DecodedImage> images = {random_image(64, 64, 1, 8), random_image(20, 30, 3, 9),
                                      random_image(100, 50, 3, 10)};
  const Tensor batch = preprocess_batch(images, config);
  EXPECT_EQ(batch.shape(), (Shape{3, 3, 32, 48}));
  std::vector<float> one(3 * 32 * 48);
  for (size_t i = 0; i < images.size(); ++i) {
    preprocess_image(images[i], config, one.data());
    EXPECT_EQ(std::vector<float>(batch.f32() + i * one.size(), batch.f32() + (i + 1) * one.size()), one);
  }
  config.do_resize = false;
  EXPECT_NE(error_of([&] { preprocess_batch(images, config); }).find("different sizes"), std::string::npos);
  EXPECT_THROW(preprocess_batch({}, config), Error);
}

TEST(ImageProcessor, WithoutResizeKeepsTheInputSize) {
  PreprocessorConfig config;
  config.do_resize = false;
  const ImageProcessor processor(config);
  const DecodedImage image = random_image(13, 7, 3, 11);
  EXPECT_EQ(processor.output_height(13, 7), 7);
  EXPECT_EQ(processor.output_width(13, 7), 13);
  std::vector<float> out(3 * 13 * 7);
  processor.process(image, out.data());
  // channel-major: out[c][y][x] from pixel (x, y) channel c
  EXPECT_EQ(out[2 * 91 + 3 * 13 + 5], processor.table_value(2, image.pixels[(3 * 13 + 5) * 3 + 2]));
}

}  // namespace
}  // namespace vitpipe
