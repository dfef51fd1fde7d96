// PNG decoding with libspng, converted the way Pillow's Image.open(p).convert("RGB") does (see data/image.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/image.h"

namespace vitpipe {

bool has_png_signature(const uint8_t* data, size_t size);

// Gray sources (any bit depth, with or without alpha/tRNS) come back with channels == 1, all others as RGB.
// Throws vitpipe::Error naming `name_for_errors` on a corrupt, truncated or oversized file.
DecodedImage decode_png(const uint8_t* data, size_t size, const std::string& name_for_errors);

}  // namespace vitpipe
