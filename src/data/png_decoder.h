// PNG decoding with libspng, converted the way Pillow's Image.open(p).convert("RGB") does (see data/image.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/image.h"
#include "data/image_read_options.h"

namespace vitpipe {

bool has_png_signature(const uint8_t* data, size_t size);

// Gray sources (any bit depth, with or without alpha/tRNS) come back with channels == 1, all others as RGB.
// 16-bit gray samples become 8 bits by `intensity` (data/image_read_options.h); every other kind is Pillow's.
// Throws vitpipe::Error naming `name_for_errors` on a corrupt, truncated or oversized file.
DecodedImage decode_png(const uint8_t* data, size_t size, const std::string& name_for_errors,
                        const IntensityPolicy& intensity = {});

}  // namespace vitpipe
