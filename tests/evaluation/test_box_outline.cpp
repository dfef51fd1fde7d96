// The radiologist's box drawn over a heatmap overlay for the report (issue 44): a white outline on the box's edge
// pixels (in overlay pixels: the box scaled as the overlay enlarges the radiograph), a black rim either side, the
// pixels inside and outside untouched, a box at the image's edge clipped.
#include <gtest/gtest.h>

#include "explain/box_outline.h"

namespace vitpipe {
namespace {

DecodedImage gray_overlay(int64_t side, uint8_t value) {
  DecodedImage image;
  image.width = image.height = side;
  image.channels = 3;
  image.pixels.assign(static_cast<size_t>(side * side * 3), value);
  return image;
}

uint8_t at(const DecodedImage& image, int64_t x, int64_t y) {
  return image.pixels[static_cast<size_t>((y * image.width + x) * 3)];
}

TEST(BoxOutline, WhiteEdgeBlackRimInsideUntouched) {
  // A 16x16 radiograph drawn at scale 2 (32x32); the box x 4..12, y 6..14 covers overlay pixels 8..23 x 12..27.
  DecodedImage image = gray_overlay(32, 100);
  FindingBox box;
  box.x = 4;
  box.y = 6;
  box.w = 8;
  box.h = 8;
  draw_box_outline(image, box, 2, 2);
  for (int64_t x = 8; x < 24; ++x) {
    EXPECT_EQ(at(image, x, 12), 255) << x;  // top edge, 2 pixels thick
    EXPECT_EQ(at(image, x, 13), 255) << x;
    EXPECT_EQ(at(image, x, 27), 255) << x;  // bottom edge
    EXPECT_EQ(at(image, x, 11), 0) << x;    // rim outside
    EXPECT_EQ(at(image, x, 28), 0) << x;
  }
  for (int64_t y = 12; y < 28; ++y) {
    EXPECT_EQ(at(image, 8, y), 255) << y;
    EXPECT_EQ(at(image, 23, y), 255) << y;
    EXPECT_EQ(at(image, 7, y), 0) << y;
    EXPECT_EQ(at(image, 24, y), 0) << y;
  }
  EXPECT_EQ(at(image, 10, 14), 0);    // the rim inside the white line
  EXPECT_EQ(at(image, 15, 20), 100);  // the box's inside shows the map
  EXPECT_EQ(at(image, 2, 2), 100);    // far outside
  EXPECT_EQ(at(image, 30, 30), 100);
}

TEST(BoxOutline, ClippedAtTheImageEdge) {
  DecodedImage image = gray_overlay(10, 50);
  FindingBox box;
  box.x = 0;
  box.y = 0;
  box.w = 10;
  box.h = 10;  // the whole image: the outline runs along its border
  draw_box_outline(image, box, 1, 1);
  EXPECT_EQ(at(image, 0, 0), 255);
  EXPECT_EQ(at(image, 9, 9), 255);
  EXPECT_EQ(at(image, 5, 0), 255);
  EXPECT_EQ(at(image, 1, 1), 0);
  EXPECT_EQ(at(image, 5, 5), 50);
  DecodedImage gray;
  gray.width = gray.height = 4;
  gray.channels = 1;
  gray.pixels.assign(16, 0);
  EXPECT_THROW(draw_box_outline(gray, box, 1), std::exception);
}

}  // namespace
}  // namespace vitpipe
