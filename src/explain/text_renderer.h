// Text on the heatmap overlays, drawn with FreeType from a TrueType font (DejaVu Sans, Debian's fonts-dejavu-core;
// VITPIPE_FONT names another file).
#pragma once

#include <cstdint>
#include <string>

#include "data/image.h"

namespace vitpipe {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};

// The font file used: $VITPIPE_FONT, else DejaVuSans.ttf where Debian installs it; throws naming both if absent.
std::string overlay_font_path();

// Width in pixels of `text` at `pixel_height`.
int64_t text_width(const std::string& text, int64_t pixel_height);
// Draws `text` (ASCII) with its top-left corner at (x, y) onto an RGB image, alpha-blended by the glyph coverage.
void draw_text(DecodedImage& image, int64_t x, int64_t y, const std::string& text, int64_t pixel_height, Rgb colour);

}  // namespace vitpipe
