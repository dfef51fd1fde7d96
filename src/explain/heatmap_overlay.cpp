#include "explain/heatmap_overlay.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "explain/text_renderer.h"
#include "util/error.h"

namespace vitpipe {
namespace {

Rgb jet(double x) {
  auto channel = [&](double centre) {
    return static_cast<uint8_t>(std::lround(255 * std::clamp(1.5 - std::abs(4 * x - centre), 0.0, 1.0)));
  };
  return Rgb{channel(3), channel(2), channel(1)};
}

void blend(uint8_t* p, Rgb c, double alpha) {
  const uint8_t target[3] = {c.r, c.g, c.b};
  for (int k = 0; k < 3; ++k) p[k] = static_cast<uint8_t>(std::lround(p[k] * (1 - alpha) + target[k] * alpha));
}

void darken_box(DecodedImage& image, int64_t x0, int64_t y0, int64_t x1, int64_t y1) {
  for (int64_t y = std::max<int64_t>(0, y0); y < std::min(image.height, y1); ++y)
    for (int64_t x = std::max<int64_t>(0, x0); x < std::min(image.width, x1); ++x)
      blend(&image.pixels[static_cast<size_t>((y * image.width + x) * 3)], Rgb{0, 0, 0}, 0.6);
}

}  // namespace

std::vector<float> normalised_map_at(const PatchMap& map, int64_t width, int64_t height) {
  const int64_t gh = map.grid_height, gw = map.grid_width;
  VP_REQUIRE(gh > 0 && gw > 0 && map.values.size() == static_cast<size_t>(gh * gw), "explain: empty map");
  auto at = [&](int64_t y, int64_t x) { return static_cast<double>(map.values[static_cast<size_t>(y * gw + x)]); };
  auto source = [](int64_t i, int64_t out_size, int64_t in_size, int64_t& i0, int64_t& i1, double& f) {
    const double s = std::max(0.0, (i + 0.5) * static_cast<double>(in_size) / static_cast<double>(out_size) - 0.5);
    i0 = std::min(static_cast<int64_t>(s), in_size - 1);
    i1 = std::min(i0 + 1, in_size - 1);
    f = s - static_cast<double>(i0);
  };
  std::vector<float> out(static_cast<size_t>(width * height));
  for (int64_t y = 0; y < height; ++y) {
    int64_t y0, y1;
    double fy;
    source(y, height, gh, y0, y1, fy);
    for (int64_t x = 0; x < width; ++x) {
      int64_t x0, x1;
      double fx;
      source(x, width, gw, x0, x1, fx);
      const double top = at(y0, x0) * (1 - fx) + at(y0, x1) * fx;
      const double bottom = at(y1, x0) * (1 - fx) + at(y1, x1) * fx;
      out[static_cast<size_t>(y * width + x)] = static_cast<float>(top * (1 - fy) + bottom * fy);
    }
  }
  const auto [lo, hi] = std::minmax_element(out.begin(), out.end());
  const float low = *lo, range = *hi - *lo;
  for (float& v : out) v = range > 0 ? (v - low) / range : 0.0f;
  return out;
}

int64_t overlay_scale(int64_t width, int64_t height) {
  const int64_t side = std::max<int64_t>(1, std::max(width, height));
  return side >= kMinOverlaySide ? 1 : (kMinOverlaySide + side - 1) / side;
}

DecodedImage heatmap_overlay(const DecodedImage& radiograph, const PatchMap& map, const OverlayCaption& caption) {
  const DecodedImage rgb = to_decoded(to_rgb(radiograph));
  const int64_t scale = overlay_scale(rgb.width, rgb.height);
  DecodedImage image;
  image.width = rgb.width * scale;
  image.height = rgb.height * scale;
  image.channels = 3;
  image.pixels.resize(static_cast<size_t>(image.width * image.height * 3));
  for (int64_t y = 0; y < image.height; ++y)  // nearest neighbour: every source pixel stays visible as it was
    for (int64_t x = 0; x < image.width; ++x)
      for (int k = 0; k < 3; ++k)
        image.pixels[static_cast<size_t>((y * image.width + x) * 3 + k)] =
            rgb.pixels[static_cast<size_t>(((y / scale) * rgb.width + x / scale) * 3 + k)];
  const int64_t w = image.width, h = image.height;
  const std::vector<float> m = normalised_map_at(map, w, h);
  for (int64_t i = 0; i < w * h; ++i) {
    const double v = m[static_cast<size_t>(i)];
    blend(&image.pixels[static_cast<size_t>(i * 3)], jet(v), 0.2 + 0.4 * v);
  }
  // Sizes follow the image so that a 64-pixel thumbnail and a 3000-pixel film both stay legible.
  const int64_t text = std::max<int64_t>(9, h / 32);
  const int64_t pad = std::max<int64_t>(2, text / 3);
  const int64_t bar_w = std::max<int64_t>(4, w / 40);
  const int64_t label_w = std::max(text_width("high", text), text_width("low", text));
  const int64_t bar_x = w - pad - label_w - pad - bar_w;
  const int64_t bar_y0 = 2 * pad + text + pad, bar_y1 = h - 2 * pad;
  darken_box(image, bar_x - pad, bar_y0 - pad, w, bar_y1 + pad);
  for (int64_t y = bar_y0; y < bar_y1; ++y) {
    const Rgb c =
        jet(1.0 - static_cast<double>(y - bar_y0) / static_cast<double>(std::max<int64_t>(1, bar_y1 - bar_y0 - 1)));
    for (int64_t x = bar_x; x < bar_x + bar_w; ++x) {
      if (x < 0 || x >= w || y < 0 || y >= h) continue;
      uint8_t* p = &image.pixels[static_cast<size_t>((y * w + x) * 3)];
      p[0] = c.r, p[1] = c.g, p[2] = c.b;
    }
  }
  draw_text(image, bar_x + bar_w + pad, bar_y0, "high", text, Rgb{255, 255, 255});
  draw_text(image, bar_x + bar_w + pad, bar_y1 - text, "low", text, Rgb{255, 255, 255});

  char probability[32];
  std::snprintf(probability, sizeof probability, "%.3f", caption.probability);
  const std::string line = caption.finding + "  p = " + probability + "  (" + caption.method + ")";
  darken_box(image, 0, 0, std::min(w, text_width(line, text) + 2 * pad), text + 2 * pad);
  draw_text(image, pad, pad, line, text, Rgb{255, 255, 255});
  return image;
}

}  // namespace vitpipe
