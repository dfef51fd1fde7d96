// A radiologist's box drawn over a heatmap overlay, so a reader sees where the finding is and where the map points:
// a white outline with a black rim (visible over any colour of the jet map).
#pragma once

#include <cstdint>

#include "data/image.h"
#include "evaluation/box_list.h"

namespace vitpipe {

// `box` in the pixels of the radiograph the overlay shows (box_in_image), `scale` the overlay's pixels per radiograph
// pixel (overlay_scale). The outline lies on the box's edge pixels, `thickness` overlay pixels wide inward, clipped to
// the image; an RGB `image` is required.
void draw_box_outline(DecodedImage& image, const FindingBox& box, int64_t scale, int64_t thickness = 2);

}  // namespace vitpipe
