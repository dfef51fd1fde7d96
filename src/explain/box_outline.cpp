#include "explain/box_outline.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace vitpipe {

void draw_box_outline(DecodedImage& image, const FindingBox& box, int64_t scale, int64_t thickness) {
  VP_REQUIRE(image.channels == 3 && scale >= 1 && thickness >= 1, "box outline: expected an RGB overlay");
  const auto s = static_cast<double>(scale);
  // The box's pixels (a pixel is in the box when its centre is) in overlay pixels: [x0, x1) x [y0, y1).
  const int64_t x0 = std::clamp<int64_t>(std::llround(box.x * s), 0, image.width);
  const int64_t y0 = std::clamp<int64_t>(std::llround(box.y * s), 0, image.height);
  const int64_t x1 = std::clamp<int64_t>(std::llround((box.x + box.w) * s), 0, image.width);
  const int64_t y1 = std::clamp<int64_t>(std::llround((box.y + box.h) * s), 0, image.height);
  if (x1 <= x0 || y1 <= y0) return;
  auto paint = [&](int64_t x, int64_t y, uint8_t value) {
    if (x < 0 || y < 0 || x >= image.width || y >= image.height) return;
    uint8_t* p = &image.pixels[static_cast<size_t>((y * image.width + x) * 3)];
    p[0] = p[1] = p[2] = value;
  };
  for (int64_t y = y0; y < y1; ++y)
    for (int64_t x = x0; x < x1; ++x) {
      const int64_t inward = std::min({x - x0, x1 - 1 - x, y - y0, y1 - 1 - y});  // 0 on the edge
      if (inward < thickness)
        paint(x, y, 255);
      else if (inward == thickness)
        paint(x, y, 0);  // the rim inside the white line
    }
  // The rim outside the white line.
  for (int64_t x = x0 - 1; x <= x1; ++x) {
    paint(x, y0 - 1, 0);
    paint(x, y1, 0);
  }
  for (int64_t y = y0; y < y1; ++y) {
    paint(x0 - 1, y, 0);
    paint(x1, y, 0);
  }
}

}  // namespace vitpipe
