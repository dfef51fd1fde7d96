#include "explain/text_renderer.h"

#include <ft2build.h>
#include FT_FREETYPE_H

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>

#include "util/error.h"

namespace vitpipe {
namespace {

constexpr const char* kDebianFont = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

// One library and face for the process (FreeType objects are not thread-safe: every use holds the mutex).
struct Font {
  FT_Library library = nullptr;
  FT_Face face = nullptr;
  std::mutex mutex;
  Font() {
    const std::string path = overlay_font_path();
    VP_REQUIRE(FT_Init_FreeType(&library) == 0, "FreeType failed to initialise");
    VP_REQUIRE(FT_New_Face(library, path.c_str(), 0, &face) == 0, path, ": not a font FreeType can read");
  }
  ~Font() {
    if (face) FT_Done_Face(face);
    if (library) FT_Done_FreeType(library);
  }
};

Font& font() {
  static Font instance;
  return instance;
}

template <class Glyph>
void for_each_glyph(const std::string& text, int64_t pixel_height, Glyph glyph) {
  Font& f = font();
  std::lock_guard<std::mutex> lock(f.mutex);
  FT_Set_Pixel_Sizes(f.face, 0, static_cast<FT_UInt>(pixel_height));
  int64_t pen = 0;
  const int64_t ascender = f.face->size->metrics.ascender >> 6;
  for (unsigned char ch : text) {
    if (FT_Load_Char(f.face, ch, FT_LOAD_RENDER) != 0) continue;
    const FT_GlyphSlot g = f.face->glyph;
    glyph(g->bitmap, pen + g->bitmap_left, ascender - g->bitmap_top);
    pen += g->advance.x >> 6;
  }
  glyph(FT_Bitmap{}, pen, -1);  // the end: pen = total width
}

}  // namespace

std::string overlay_font_path() {
  if (const char* env = std::getenv("VITPIPE_FONT"); env && *env) {
    VP_REQUIRE(std::filesystem::is_regular_file(env), "VITPIPE_FONT=", env, ": no such font file");
    return env;
  }
  VP_REQUIRE(std::filesystem::is_regular_file(kDebianFont), kDebianFont,
             ": font missing (install Debian's fonts-dejavu-core, or set VITPIPE_FONT to a .ttf file)");
  return kDebianFont;
}

int64_t text_width(const std::string& text, int64_t pixel_height) {
  int64_t width = 0;
  for_each_glyph(text, pixel_height, [&](const FT_Bitmap&, int64_t x, int64_t y) {
    if (y == -1) width = x;
  });
  return width;
}

void draw_text(DecodedImage& image, int64_t x0, int64_t y0, const std::string& text, int64_t pixel_height, Rgb colour) {
  VP_REQUIRE(image.channels == 3, "draw_text needs an RGB image");
  for_each_glyph(text, pixel_height, [&](const FT_Bitmap& bitmap, int64_t gx, int64_t gy) {
    for (unsigned r = 0; r < bitmap.rows; ++r) {
      for (unsigned c = 0; c < bitmap.width; ++c) {
        const int64_t x = x0 + gx + c, y = y0 + gy + r;
        if (x < 0 || y < 0 || x >= image.width || y >= image.height) continue;
        const double a = bitmap.buffer[r * static_cast<unsigned>(bitmap.pitch) + c] / 255.0;
        uint8_t* p = &image.pixels[static_cast<size_t>((y * image.width + x) * 3)];
        const uint8_t target[3] = {colour.r, colour.g, colour.b};
        for (int k = 0; k < 3; ++k) p[k] = static_cast<uint8_t>(std::lround(p[k] * (1 - a) + target[k] * a));
      }
    }
  });
}

}  // namespace vitpipe
