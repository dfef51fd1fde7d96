#include "data/jpeg_decoder.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <csetjmp>
#include <cstring>
#include <exception>
#include <vector>

#include "util/decode_memory.h"
#include "util/error.h"
#include "util/size_limits.h"

namespace vitpipe {
namespace {

// libjpeg reports fatal errors through error_exit, which must not return: we longjmp back to decode_raw(). Only C
// frames of libjpeg lie between setjmp and longjmp, so no C++ destructor is skipped.
struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  bool truncated = false;
  char message[JMSG_LENGTH_MAX] = {};
  const std::string* name = nullptr;
  std::exception_ptr refused;  // the decode memory budget's refusal, rethrown once libjpeg is cleaned up
};

// No exception may cross decode_raw's setjmp frame: a refusal is kept and rethrown by the caller.
bool reserve_memory(int64_t bytes, ErrorManager& err) noexcept {
  try {
    reserve_decode_memory(bytes, *err.name);
    return true;
  } catch (...) {
    err.refused = std::current_exception();
    return false;
  }
}

void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void on_message(j_common_ptr cinfo, int msg_level) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  // Warnings (level -1) are ignored like Pillow does, except running out of data: Pillow's suspending reader then
  // raises "image file is truncated", even when only the EOI marker is missing.
  if (msg_level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) err->truncated = true;
}

struct RawJpeg {
  int64_t width = 0;
  int64_t height = 0;
  int components = 0;  // 1 gray, 3 RGB, 4 CMYK (after libjpeg's YCCK -> CMYK)
  std::vector<uint8_t> pixels;
};

// Returns false with err.message set on a libjpeg error. Kept free of objects with destructors between setjmp and
// the return, apart from `out` which lives in the caller.
bool decode_raw(const uint8_t* data, size_t size, RawJpeg& out, ErrorManager& err) {
  const int64_t max_pixels = max_image_pixels();
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_message;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);

  // Pillow's JpegImagePlugin maps the component count to its mode and asks libjpeg for that output; the colour space
  // of the file itself is libjpeg's own guess (Pillow leaves jpeg_color_space alone). Default DCT (islow) and fancy
  // upsampling: Pillow only changes them in draft mode.
  const int components = cinfo.num_components;
  if (components == 1) {
    cinfo.out_color_space = JCS_GRAYSCALE;
  } else if (components == 3) {
    cinfo.out_color_space = JCS_RGB;
  } else if (components == 4) {
    cinfo.out_color_space = JCS_CMYK;
  } else {
    std::snprintf(err.message, sizeof err.message, "JPEG with %d components is not supported (1, 3 or 4)", components);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  const int64_t width = cinfo.image_width;
  const int64_t height = cinfo.image_height;
  if (width * height > max_pixels) {
    std::snprintf(err.message, sizeof err.message,
                  "JPEG is %lldx%lld = %lld pixels, more than the limit of %lld (refused as a possible "
                  "decompression bomb; set VITPIPE_MAX_IMAGE_PIXELS to raise it)",
                  static_cast<long long>(width), static_cast<long long>(height), static_cast<long long>(width * height),
                  static_cast<long long>(max_pixels));
    jpeg_destroy_decompress(&cinfo);
    return false;
  }

  // What is allocated below (the samples; CMYK also its RGB result), before anything of that size is.
  if (!reserve_memory(width * height * (components == 4 ? 7 : components), err)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_start_decompress(&cinfo);
  const int64_t stride = int64_t{cinfo.output_width} * cinfo.output_components;
  out.width = cinfo.output_width;
  out.height = cinfo.output_height;
  out.components = cinfo.output_components;
  out.pixels.resize(static_cast<size_t>(stride * out.height));
  while (cinfo.output_scanline < cinfo.output_height && !err.truncated) {
    JSAMPROW row = out.pixels.data() + stride * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  if (!err.truncated) jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (err.truncated) {
    std::snprintf(err.message, sizeof err.message, "JPEG is truncated (premature end of data)");
    return false;
  }
  return true;
}

// Pillow's MULDIV255: a * b / 255 rounded, in integers.
inline int muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

}  // namespace

bool has_jpeg_signature(const uint8_t* data, size_t size) {
  return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

DecodedImage decode_jpeg(const uint8_t* data, size_t size, const std::string& name) {
  VP_REQUIRE(has_jpeg_signature(data, size), name, ": not a JPEG file (no SOI marker)");
  RawJpeg raw;
  ErrorManager err;
  err.name = &name;
  if (!decode_raw(data, size, raw, err)) {
    if (err.refused) std::rethrow_exception(err.refused);
    fail(name, ": corrupt or unsupported JPEG (", err.message, ")");
  }

  DecodedImage out;
  out.width = raw.width;
  out.height = raw.height;
  if (raw.components == 1) {
    out.channels = 1;
    out.pixels = std::move(raw.pixels);
  } else if (raw.components == 3) {
    out.channels = 3;
    out.pixels = std::move(raw.pixels);
  } else {
    // Pillow reads 4-component JPEGs as "CMYK;I" (Adobe polarity: stored inverted, whatever the markers say) and
    // converts CMYK -> RGB as R = k' - k' * c / 255 with k' = 255 - K, all in Pillow's rounded integer arithmetic.
    out.channels = 3;
    const size_t n = static_cast<size_t>(raw.width * raw.height);
    out.pixels.resize(n * 3);
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* cmyk = raw.pixels.data() + 4 * i;
      const int not_k = cmyk[3];  // 255 - (255 - stored K)
      for (int ch = 0; ch < 3; ++ch) {
        const int c = 255 - cmyk[ch];
        const int v = not_k - muldiv255(c, not_k);
        out.pixels[3 * i + ch] = static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
      }
    }
  }
  return out;
}

}  // namespace vitpipe
