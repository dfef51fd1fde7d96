// Pillow's Image.resize(), bit for bit, for 8-bit gray and RGB images (Pillow 9.x/10.x, libImaging/Resample.c).
//
// Pillow resamples with a separable convolution: for each output column a window of input columns weighted by the
// filter, whose support is stretched by the downscale factor (so downscaling antialiases); weights normalised to sum
// 1, turned into 22-bit fixed point, accumulated in int32 from a rounding 1 << 21, then clipped to 0..255. The
// horizontal pass runs first (only over the rows the vertical pass reads) into a uint8 image, then the vertical
// pass. A dimension that does not change is not resampled. NEAREST is not a convolution: Pillow maps output pixel
// centres through an affine transform (accumulated in double), which we reproduce too.
#pragma once

#include <cstdint>
#include <string>

#include "data/image.h"

namespace vitpipe {

// Numbered like PIL.Image.Resampling, which is what preprocessor_config.json's "resample" holds.
enum class ResampleFilter : int { nearest = 0, lanczos = 1, bilinear = 2, bicubic = 3, box = 4, hamming = 5 };

ResampleFilter resample_filter_from_pil(int pil_id);  // throws vitpipe::Error on an unknown id
std::string resample_filter_name(ResampleFilter filter);

// `in` is in_height rows of in_width pixels with `channels` (1 or 3) interleaved uint8 channels; `out` receives
// out_height * out_width * channels bytes. Each channel is resampled independently, as Pillow does for modes "L" and
// "RGB", so resizing a gray image and replicating it equals resizing its RGB expansion. Thread-safe; the weight
// tables of each (input size, output size, filter) are computed once and cached.
void resize_like_pillow(const uint8_t* in, int64_t in_width, int64_t in_height, int channels, uint8_t* out,
                        int64_t out_width, int64_t out_height, ResampleFilter filter);

DecodedImage resize_like_pillow(const DecodedImage& image, int64_t out_width, int64_t out_height,
                                ResampleFilter filter);
RgbImage resize_like_pillow(const RgbImage& image, int64_t out_width, int64_t out_height, ResampleFilter filter);

}  // namespace vitpipe
