#include "data/png_encoder.h"

#include <spng.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "util/error.h"

namespace vitpipe {
namespace {

struct SpngContextFree {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};

void check(int status, const char* step) {
  VP_REQUIRE(status == 0, "PNG encoder: ", step, ": ", spng_strerror(status));
}

}  // namespace

std::vector<uint8_t> encode_png(const DecodedImage& image) {
  VP_REQUIRE(image.channels == 1 || image.channels == 3, "PNG encoder: expected 1 or 3 channels, got ", image.channels);
  VP_REQUIRE(image.width > 0 && image.height > 0 && image.width <= 0x7fffffff && image.height <= 0x7fffffff,
             "PNG encoder: bad size ", image.width, "x", image.height);
  std::unique_ptr<spng_ctx, SpngContextFree> ctx(spng_ctx_new(SPNG_CTX_ENCODER));
  VP_REQUIRE(ctx != nullptr, "PNG encoder: out of memory");
  check(spng_set_option(ctx.get(), SPNG_ENCODE_TO_BUFFER, 1), "buffer output");
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(image.width);
  ihdr.height = static_cast<uint32_t>(image.height);
  ihdr.bit_depth = 8;
  ihdr.color_type = image.channels == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR;
  check(spng_set_ihdr(ctx.get(), &ihdr), "header");
  check(spng_encode_image(ctx.get(), image.pixels.data(), image.pixels.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE),
        "pixels");
  size_t length = 0;
  int error = 0;
  void* buffer = spng_get_png_buffer(ctx.get(), &length, &error);
  check(error, "output");
  std::vector<uint8_t> out(static_cast<uint8_t*>(buffer), static_cast<uint8_t*>(buffer) + length);
  std::free(buffer);
  return out;
}

}  // namespace vitpipe
