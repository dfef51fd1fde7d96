// Position embeddings for another resolution, exactly as transformers >= 4.45 (ViTEmbeddings.
// interpolate_pos_encoding): the patch-grid part is resized with torch.nn.functional.interpolate(mode="bicubic",
// size=(new_h, new_w), align_corners=False): cubic convolution with A = -0.75, half-pixel centres, source indices
// clamped at the edges, no antialiasing; the CLS entry is kept. (Older transformers passed a scale factor of
// (new + 0.1) / old, which maps coordinates slightly differently; we follow the modern rule.)
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace vitpipe {

// src: `channels` planes of in_h x in_w (row-major, plane after plane); dst: channels planes of out_h x out_w.
// Computed in double and rounded once: equal (to the last bit, but for rare ties) to torch's float64 kernel on the
// same values. torch's float32 CPU kernel (what transformers runs on fp32 weights) carries its own rounding of the
// weights, ~1e-7 relative; the two differ by up to ~1e-6 of the values' magnitude.
void bicubic_resize(const float* src, int64_t channels, int64_t in_h, int64_t in_w, float* dst, int64_t out_h,
                    int64_t out_w);

// position_embeddings [1, kept + old_h * old_w, D] (CLS, for DeiT also the distillation token, then the patch grid
// row by row) -> [1, kept + new_h * new_w, D]. The old grid must be square (as transformers assumes); F32 only.
Tensor interpolate_position_embeddings(const Tensor& position_embeddings, int64_t new_h, int64_t new_w,
                                       int64_t kept = 1);

// The same maps as dense [out_size, in_size] matrices of one axis (row o: the weights output o gives each input):
// torch.nn.functional.interpolate(mode="bicubic", align_corners=False) without antialiasing (the taps above), or
// with antialias=True as DINOv2 with registers asks (torch's _upsample_bicubic2d_aa: Pillow's rule, A = -0.5, the
// support widened by the downscale factor, weights normalised over the taps inside the input). In double.
std::vector<double> bicubic_weight_matrix(int64_t in_size, int64_t out_size, bool antialias);

}  // namespace vitpipe
