#include "data/png_decoder.h"

#include <spng.h>

#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "data/intensity_mapping.h"
#include "util/decode_memory.h"
#include "util/error.h"
#include "util/size_limits.h"

namespace vitpipe {
namespace {

constexpr std::array<uint8_t, 8> kPngSignature{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
// Ancillary chunks (text, ICC profiles, EXIF) of real files are kilobytes; these stop a file from making libspng
// allocate gigabytes for metadata we never look at.
constexpr size_t kMaxChunkBytes = size_t{64} << 20;
constexpr size_t kMaxChunkCacheBytes = size_t{128} << 20;

enum PngColorType : uint8_t { kGray = 0, kRgb = 2, kPalette = 3, kGrayAlpha = 4, kRgba = 6 };

struct SpngContextFree {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};

void check(int status, const std::string& name, const char* step) {
  if (status != 0) fail(name, ": corrupt or unsupported PNG (", step, ": ", spng_strerror(status), ")");
}

// Sample `x` of a row packed at `depth` < 8 bits, most significant bits first.
inline uint8_t packed_sample(const uint8_t* row, int64_t x, int depth) {
  const int per_byte = 8 / depth;
  const int shift = 8 - depth * (static_cast<int>(x % per_byte) + 1);
  return static_cast<uint8_t>((row[x / per_byte] >> shift) & ((1 << depth) - 1));
}

inline uint16_t sample16(const uint8_t* row, int64_t index) {
  uint16_t value;  // SPNG_FMT_PNG gives 16-bit samples in host byte order
  std::memcpy(&value, row + 2 * index, sizeof value);
  return value;
}

// 16-bit gray (+ alpha) -> 8 bits by the intensity policy (data/intensity_mapping.h). Pillow's own behaviour
// (--intensity pillow): 16-bit gray opens as mode "I" and convert("RGB") clamps each value to 0..255, no scaling;
// gray+alpha opens as "LA;16B", keeping the high byte.
void convert_gray16(const uint8_t* in, size_t row_bytes, int in_channels, const IntensityPolicy& intensity,
                    const std::string& name, DecodedImage& out) {
  const int64_t w = out.width;
  if (intensity.kind == IntensityKind::pillow && in_channels == 2) {
    for (int64_t y = 0; y < out.height; ++y)
      for (int64_t x = 0; x < w; ++x)
        out.pixels[y * w + x] = static_cast<uint8_t>(sample16(in + static_cast<size_t>(y) * row_bytes, x * 2) >> 8);
    return;
  }
  std::vector<uint16_t> gray(static_cast<size_t>(w * out.height));
  for (int64_t y = 0; y < out.height; ++y)
    for (int64_t x = 0; x < w; ++x)
      gray[y * w + x] = sample16(in + static_cast<size_t>(y) * row_bytes, x * in_channels);
  if (intensity.kind == IntensityKind::automatic) warn_full_range_once(name, 16);
  gray16_to_levels(gray.data(), gray.size(), 16, intensity, out.pixels.data());
}

// Gray of 8 bits or fewer -> 8 bits, one channel.
void convert_gray(const uint8_t* in, size_t row_bytes, int depth, int in_channels, DecodedImage& out) {
  const int64_t w = out.width;
  for (int64_t y = 0; y < out.height; ++y) {
    const uint8_t* row = in + static_cast<size_t>(y) * row_bytes;
    uint8_t* dst = out.pixels.data() + y * w;
    if (depth == 8) {
      for (int64_t x = 0; x < w; ++x) dst[x] = row[x * in_channels];
    } else {
      // 1/2/4 bits ("1", "L;2", "L;4" in Pillow): scaled by bit replication, 255 / (2^depth - 1).
      const int scale = 255 / ((1 << depth) - 1);
      for (int64_t x = 0; x < w; ++x) dst[x] = static_cast<uint8_t>(packed_sample(row, x, depth) * scale);
    }
  }
}

// RGB or RGBA of 8 or 16 bits -> 8-bit RGB (alpha dropped, 16 bits -> high byte).
void convert_rgb(const uint8_t* in, size_t row_bytes, int depth, int in_channels, DecodedImage& out) {
  const int64_t w = out.width;
  for (int64_t y = 0; y < out.height; ++y) {
    const uint8_t* row = in + static_cast<size_t>(y) * row_bytes;
    uint8_t* dst = out.pixels.data() + y * w * 3;
    for (int64_t x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        const int64_t index = x * in_channels + c;
        dst[x * 3 + c] = depth == 16 ? static_cast<uint8_t>(sample16(row, index) >> 8) : row[index];
      }
    }
  }
}

void convert_palette(const uint8_t* in, size_t row_bytes, int depth, const spng_plte& plte, DecodedImage& out) {
  // Pillow's palette starts as a grey ramp and PLTE overwrites its first entries, so an index past the end of PLTE
  // maps to (i, i, i).
  std::array<std::array<uint8_t, 3>, 256> table;
  for (int i = 0; i < 256; ++i) table[i] = {uint8_t(i), uint8_t(i), uint8_t(i)};
  for (uint32_t i = 0; i < plte.n_entries && i < 256; ++i) {
    table[i] = {plte.entries[i].red, plte.entries[i].green, plte.entries[i].blue};
  }
  const int64_t w = out.width;
  for (int64_t y = 0; y < out.height; ++y) {
    const uint8_t* row = in + static_cast<size_t>(y) * row_bytes;
    uint8_t* dst = out.pixels.data() + y * w * 3;
    for (int64_t x = 0; x < w; ++x) {
      const uint8_t index = depth == 8 ? row[x] : packed_sample(row, x, depth);
      std::memcpy(dst + x * 3, table[index].data(), 3);
    }
  }
}

}  // namespace

bool has_png_signature(const uint8_t* data, size_t size) {
  return size >= kPngSignature.size() && std::memcmp(data, kPngSignature.data(), kPngSignature.size()) == 0;
}

DecodedImage decode_png(const uint8_t* data, size_t size, const std::string& name, const IntensityPolicy& intensity) {
  VP_REQUIRE(has_png_signature(data, size), name, ": not a PNG file (no PNG signature)");
  std::unique_ptr<spng_ctx, SpngContextFree> ctx(spng_ctx_new(0));
  VP_REQUIRE(ctx != nullptr, name, ": out of memory creating a PNG decoder");
  spng_ctx* c = ctx.get();
  check(spng_set_png_buffer(c, data, size), name, "reading the buffer");
  check(spng_set_chunk_limits(c, kMaxChunkBytes, kMaxChunkCacheBytes), name, "setting chunk limits");
  // A bad checksum anywhere is an error (Pillow refuses bad CRCs too), not a silently discarded chunk.
  check(spng_set_crc_action(c, SPNG_CRC_ERROR, SPNG_CRC_ERROR), name, "setting CRC checks");

  spng_ihdr ihdr{};
  check(spng_get_ihdr(c, &ihdr), name, "reading the header");
  const int64_t width = ihdr.width;
  const int64_t height = ihdr.height;
  VP_REQUIRE(width > 0 && height > 0, name, ": PNG has an empty size ", width, "x", height);
  const int64_t max_pixels = max_image_pixels();
  VP_REQUIRE(width * height <= max_pixels, name, ": PNG is ", width, "x", height, " = ", width * height,
             " pixels, more than the limit of ", max_pixels,
             " (refused as a possible decompression bomb; set VITPIPE_MAX_IMAGE_PIXELS to raise it)");

  const int depth = ihdr.bit_depth;
  const int color = ihdr.color_type;
  spng_plte plte{};
  if (color == kPalette) check(spng_get_plte(c, &plte), name, "reading the palette");

  size_t decoded_size = 0;
  check(spng_decoded_image_size(c, SPNG_FMT_PNG, &decoded_size), name, "sizing the image");
  const size_t row_bytes = decoded_size / static_cast<size_t>(height);

  DecodedImage out;
  out.width = width;
  out.height = height;
  out.channels = (color == kGray || color == kGrayAlpha) ? 1 : 3;
  const size_t out_size = static_cast<size_t>(width * height * out.channels);
  // What is allocated below: the result, and the decoded samples first unless they already are the result.
  const bool direct = depth == 8 && (color == kGray || color == kRgb);
  reserve_decode_memory(static_cast<int64_t>(out_size + (direct ? 0 : decoded_size)), name);

  // 8-bit gray and 8-bit RGB are already in their final layout: decode straight into the result.
  if (direct) {
    out.pixels.resize(out_size);
    VP_REQUIRE(decoded_size == out_size, name, ": unexpected decoded size");
    check(spng_decode_image(c, out.pixels.data(), decoded_size, SPNG_FMT_PNG, 0), name, "decoding pixels");
    return out;
  }

  std::vector<uint8_t> raw(decoded_size);
  check(spng_decode_image(c, raw.data(), decoded_size, SPNG_FMT_PNG, 0), name, "decoding pixels");
  out.pixels.resize(out_size);
  switch (color) {
    case kGray:
    case kGrayAlpha:
      if (depth == 16) {
        convert_gray16(raw.data(), row_bytes, color == kGray ? 1 : 2, intensity, name, out);
      } else {
        convert_gray(raw.data(), row_bytes, depth, color == kGray ? 1 : 2, out);
      }
      break;
    case kRgb:
      convert_rgb(raw.data(), row_bytes, depth, 3, out);
      break;
    case kRgba:
      convert_rgb(raw.data(), row_bytes, depth, 4, out);
      break;
    case kPalette:
      convert_palette(raw.data(), row_bytes, depth, plte, out);
      break;
    default:
      fail(name, ": PNG colour type ", color, " is not valid");
  }
  return out;
}

}  // namespace vitpipe
