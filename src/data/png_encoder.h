// 8-bit PNG encoding with libspng: what `vitpipe image convert` writes (gray stays one channel).
#pragma once

#include <cstdint>
#include <vector>

#include "data/image.h"

namespace vitpipe {

// A whole PNG file holding `image` (8-bit gray when channels == 1, else 8-bit RGB).
std::vector<uint8_t> encode_png(const DecodedImage& image);

}  // namespace vitpipe
