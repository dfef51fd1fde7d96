// Signature dispatch between the PNG, JPEG and DICOM decoders, file reading, and gray -> RGB expansion.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "data/dicom_decoder.h"
#include "data/image.h"
#include "data/jpeg_decoder.h"
#include "data/png_decoder.h"
#include "util/error.h"

namespace vitpipe {
namespace {

// The whole file in memory: one read() is cheaper than a mapping for the ~200 KB files of a dataset.
std::vector<uint8_t> read_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VP_REQUIRE(fd >= 0, "cannot open image ", path.string(), ": ", std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    fail("cannot read image ", path.string(), ": not a regular file");
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(info.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      fail("cannot read image ", path.string(), ": ", n == 0 ? "file shrank while reading" : std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return bytes;
}

}  // namespace

DecodedImage decode_image_memory_keep_gray(const uint8_t* data, size_t size, const std::string& name,
                                           const ImageReadOptions& options) {
  VP_REQUIRE(size > 0, name, ": empty file, not an image");
  if (has_png_signature(data, size)) return decode_png(data, size, name, options.intensity);
  if (has_jpeg_signature(data, size)) return decode_jpeg(data, size, name);
  if (has_dicom_preamble(data, size)) return decode_dicom(data, size, name, options);
  fail(name, ": not a PNG or JPEG file (unknown signature), nor DICOM (no \"DICM\" at byte 128)");
}

DecodedImage decode_image_file_keep_gray(const std::filesystem::path& path, const ImageReadOptions& options) {
  const std::vector<uint8_t> bytes = read_file(path);
  return decode_image_memory_keep_gray(bytes.data(), bytes.size(), path.string(), options);
}

RgbImage decode_image_memory(const uint8_t* data, size_t size, const std::string& name,
                             const ImageReadOptions& options) {
  return to_rgb(decode_image_memory_keep_gray(data, size, name, options));
}

RgbImage decode_image_file(const std::filesystem::path& path, const ImageReadOptions& options) {
  return to_rgb(decode_image_file_keep_gray(path, options));
}

bool has_image_signature(const std::filesystem::path& path) {
  uint8_t head[132] = {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < sizeof head) {
    const ssize_t n = ::read(fd, head + done, sizeof head - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return has_png_signature(head, done) || has_jpeg_signature(head, done) || has_dicom_preamble(head, done);
}

RgbImage to_rgb(DecodedImage&& image) {
  if (image.channels == 3) {
    RgbImage out;
    out.width = image.width;
    out.height = image.height;
    out.pixels = std::move(image.pixels);
    return out;
  }
  return to_rgb(static_cast<const DecodedImage&>(image));
}

RgbImage to_rgb(const DecodedImage& image) {
  RgbImage out;
  out.width = image.width;
  out.height = image.height;
  const size_t n = static_cast<size_t>(image.width * image.height);
  if (image.channels == 3) {
    out.pixels = image.pixels;
    return out;
  }
  VP_REQUIRE(image.channels == 1, "to_rgb: expected 1 or 3 channels, got ", image.channels);
  out.pixels.resize(n * 3);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t v = image.pixels[i];
    out.pixels[3 * i] = v;
    out.pixels[3 * i + 1] = v;
    out.pixels[3 * i + 2] = v;
  }
  return out;
}

DecodedImage to_decoded(const RgbImage& image) {
  DecodedImage out;
  out.width = image.width;
  out.height = image.height;
  out.channels = 3;
  out.pixels = image.pixels;
  return out;
}

}  // namespace vitpipe
