// Decoded images: 8-bit RGB, interleaved, row-major: exactly what Pillow's Image.convert("RGB") gives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace vitpipe {

struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3
};

// PNG (libspng) or JPEG (libjpeg-turbo), chosen by signature. Throws vitpipe::Error naming the file on a corrupt,
// truncated or unsupported file.
RgbImage decode_image_file(const std::filesystem::path& path);
RgbImage decode_image_memory(const uint8_t* data, size_t size, const std::string& name_for_errors);

}  // namespace vitpipe
