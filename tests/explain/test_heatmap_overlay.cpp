// The overlay's furniture (issue 45): the colour bar sits in a panel beside the film and the caption in a band above
// it, so every film pixel is the radiograph blended with the map and nothing else; and the colours are on the
// probability's scale, so a p = 0.158 finding's map stays in the blues however peaked it is.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "explain/heatmap_overlay.h"
#include "explain/text_renderer.h"

namespace vitpipe {
namespace {

bool font_available() {
  try {
    overlay_font_path();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

DecodedImage gray_film(int64_t width, int64_t height, uint8_t level) {
  DecodedImage image;
  image.width = width;
  image.height = height;
  image.channels = 1;
  image.pixels.assign(static_cast<size_t>(width * height), level);
  return image;
}

const uint8_t* pixel(const DecodedImage& image, int64_t x, int64_t y) {
  return &image.pixels[static_cast<size_t>((y * image.width + x) * 3)];
}

// A 14 x 14 patch grid, zero but for one hot patch near the right edge (where the old bar was drawn).
PatchMap one_hot_patch() {
  PatchMap map{14, 14, std::vector<float>(14 * 14, 0.0f)};
  map.values[7 * 14 + 13] = 1.0f;
  return map;
}

TEST(HeatmapOverlay, TheFilmIsUntouchedByTheColourBarAndCaption) {
  if (!font_available()) GTEST_SKIP() << "no font for the overlay's text (fonts-dejavu-core)";
  const DecodedImage film = gray_film(300, 200, 128);
  // A constant map normalises to 0 everywhere: every film pixel must be gray 128 blended 20% towards jet(0) =
  // (0, 0, 128), whatever the probability: (102, 102, 128), written out here rather than recomputed.
  const PatchMap flat{14, 14, std::vector<float>(14 * 14, 0.5f)};
  const DecodedImage overlay =
      heatmap_overlay(film, flat, OverlayCaption{"Effusion", 0.9, "gradcam"}, ImageRegion{0, 0, 300, 200});
  const OverlayLayout l = overlay_layout(300, 200);
  ASSERT_EQ(l.film_width, 300);
  ASSERT_EQ(l.film_height, 200);
  EXPECT_GT(l.width, l.film_width) << "the canvas is wider than the film: the bar has its own panel";
  EXPECT_GT(l.height, l.film_height) << "the caption has its own band";
  ASSERT_EQ(overlay.width, l.width);
  ASSERT_EQ(overlay.height, l.height);
  int64_t differing = 0;
  for (int64_t y = 0; y < l.film_height; ++y)
    for (int64_t x = 0; x < l.film_width; ++x) {
      const uint8_t* p = pixel(overlay, l.film_x + x, l.film_y + y);
      differing += p[0] != 102 || p[1] != 102 || p[2] != 128;
    }
  EXPECT_EQ(differing, 0) << "film pixels covered by something other than the map (the right tenth: the old bar)";
  // The bar is there, in the panel: its top is the scale's 1 (jet: dark red), bright red below it.
  int64_t red = 0, caption_ink = 0;
  for (int64_t y = 0; y < l.height; ++y)
    for (int64_t x = l.film_x + l.film_width; x < l.width; ++x) red += pixel(overlay, x, y)[0] == 255;
  for (int64_t y = 0; y < l.film_y; ++y)
    for (int64_t x = 0; x < l.width; ++x) caption_ink += pixel(overlay, x, y)[1] > 100;
  EXPECT_GT(red, 0) << "no colour bar beside the film";
  EXPECT_GT(caption_ink, 0) << "no caption above the film";
}

TEST(HeatmapOverlay, ALowProbabilityFindingStaysInTheLowColours) {
  if (!font_available()) GTEST_SKIP() << "no font for the overlay's text (fonts-dejavu-core)";
  const DecodedImage film = gray_film(224, 224, 128);
  const ImageRegion whole{0, 0, 224, 224};
  const PatchMap map = one_hot_patch();
  const OverlayLayout l = overlay_layout(224, 224);
  auto film_max = [&](const DecodedImage& overlay, int channel) {
    int most = 0;
    for (int64_t y = 0; y < l.film_height; ++y)
      for (int64_t x = 0; x < l.film_width; ++x)
        most = std::max<int>(most, pixel(overlay, l.film_x + x, l.film_y + y)[channel]);
    return most;
  };
  // p = 0.158: the hottest value is 0.158 on the bar, jet's blue-cyan: red is never added to the gray film (jet's
  // red channel starts at 0.375), so no film pixel's red exceeds the gray level.
  const DecodedImage low = heatmap_overlay(film, map, OverlayCaption{"Nodule", 0.158, "grad-rollout"}, whole);
  EXPECT_LT(film_max(low, 0), 128) << "a p = 0.158 finding painted red";
  EXPECT_GT(film_max(low, 2), 128) << "... but it is drawn, in blue";
  // The same map at p = 0.95 reaches the red end: the scale is the probability, not the map's own maximum.
  const DecodedImage high = heatmap_overlay(film, map, OverlayCaption{"Nodule", 0.95, "grad-rollout"}, whole);
  EXPECT_GT(film_max(high, 0), 160) << "a p = 0.95 finding's peak is drawn in red";
  EXPECT_DOUBLE_EQ(overlay_colour_value(1.0, 0.158), 0.158);
  EXPECT_DOUBLE_EQ(overlay_colour_value(0.5, 1.0), 0.5);
}

TEST(HeatmapOverlay, AThumbnailIsEnlargedAndKeepsItsFilmArea) {
  if (!font_available()) GTEST_SKIP() << "no font for the overlay's text (fonts-dejavu-core)";
  const OverlayLayout l = overlay_layout(32, 32);
  EXPECT_EQ(l.scale, 8);
  EXPECT_EQ(l.film_width, 256);
  EXPECT_EQ(l.film_height, 256);
  EXPECT_GT(l.width, l.film_width);
  EXPECT_GT(l.height, l.film_height);
}

}  // namespace
}  // namespace vitpipe
