// JPEG decoding with libjpeg-turbo, with the settings Pillow uses, so that the pixels match its convert("RGB").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/image.h"

namespace vitpipe {

bool has_jpeg_signature(const uint8_t* data, size_t size);

// One-component files come back with channels == 1, YCbCr/RGB/CMYK/YCCK as RGB. Truncated files, even those only
// missing their EOI marker, are refused as Pillow refuses them; other libjpeg warnings (e.g. extraneous bytes) are
// tolerated, as in Pillow.
DecodedImage decode_jpeg(const uint8_t* data, size_t size, const std::string& name_for_errors);

}  // namespace vitpipe
