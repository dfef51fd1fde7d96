// Decoded images: 8-bit RGB, interleaved, row-major: exactly what Pillow's Image.convert("RGB") gives.
//
// What "exactly" means, per source kind (verified against Debian's Pillow 9.4, see tests/image/):
// - 8-bit gray, RGB, palette: the values themselves (gray -> R = G = B, palette -> its RGB entry; an index past the
//   end of PLTE gives (i, i, i), Pillow's default grey ramp).
// - gray of 1, 2 or 4 bits: scaled to 8 bits by bit replication (x255, x85, x17), as Pillow's "1"/"L;2"/"L;4".
// - alpha (gray+alpha, RGBA, tRNS): dropped, never composited onto a background.
// - 16-bit RGB / RGBA / gray+alpha: the high byte of each sample.
// - 16-bit GRAY: by the intensity policy (data/image_read_options.h). `--intensity pillow` is Pillow's: CLIPPED to
//   0..255, NOT scaled (Pillow opens it as mode "I" and convert("RGB") clamps, so a 12-bit X-ray stored in 16 bits
//   comes out almost entirely white); the default scales it over its full range instead.
// - DICOM (recognised by "DICM" at byte 128, whatever the extension): data/dicom_decoder.h and data/dicom_pixels.h.
// - JPEG: libjpeg-turbo with Pillow's settings (islow DCT, fancy upsampling); CMYK/YCCK are inverted ("Adobe"
//   polarity) and converted to RGB with Pillow's integer formula.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/image_read_options.h"

namespace vitpipe {

// Decompression-bomb guard: images with more pixels than this are refused before any pixel buffer is allocated.
// The default of max_image_pixels() (util/size_limits.h), which VITPIPE_MAX_IMAGE_PIXELS raises.
constexpr int64_t kMaxImagePixels = int64_t{1} << 28;

struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3
};

// What the decoders produce: a gray source stays one channel (it stands for R = G = B) so that resizing and
// normalising touch a third of the data. to_rgb() of it is exactly Pillow's convert("RGB").
struct DecodedImage {
  int64_t width = 0;
  int64_t height = 0;
  int channels = 3;             // 1: gray (R = G = B), 3: RGB
  std::vector<uint8_t> pixels;  // height * width * channels, interleaved

  bool is_gray() const { return channels == 1; }
};

RgbImage to_rgb(const DecodedImage& image);
RgbImage to_rgb(DecodedImage&& image);  // reuses the buffer when it is already RGB
DecodedImage to_decoded(const RgbImage& image);

// PNG (libspng), JPEG (libjpeg-turbo) or DICOM (DCMTK), chosen by signature; `options` says how sources above 8 bits
// become 8-bit. Throws vitpipe::Error naming the file on a corrupt, truncated, oversized (> max_image_pixels()) or
// unsupported file.
RgbImage decode_image_file(const std::filesystem::path& path, const ImageReadOptions& options = {});
RgbImage decode_image_memory(const uint8_t* data, size_t size, const std::string& name_for_errors,
                             const ImageReadOptions& options = {});

// The same, but gray sources stay gray (channels == 1): the fast path of the data loader.
DecodedImage decode_image_file_keep_gray(const std::filesystem::path& path, const ImageReadOptions& options = {});
DecodedImage decode_image_memory_keep_gray(const uint8_t* data, size_t size, const std::string& name_for_errors,
                                           const ImageReadOptions& options = {});

// True when the file starts like a PNG, a JPEG or a DICOM file (reads at most 132 bytes).
bool has_image_signature(const std::filesystem::path& path);

}  // namespace vitpipe
