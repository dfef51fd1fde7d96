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

namespace {

// Sizes follow the film so that a 64-pixel thumbnail and a 3000-pixel film both stay legible.
struct Furniture {
  int64_t text, pad, bar_w, label_w, band_h, panel_w;
};

Furniture furniture(int64_t film_height) {
  Furniture f{};
  f.text = std::max<int64_t>(9, film_height / 32);
  f.pad = std::max<int64_t>(2, f.text / 3);
  f.bar_w = std::max<int64_t>(4, film_height / 40);
  f.label_w = std::max({text_width("1", f.text), text_width("0", f.text), text_width("p", f.text)});
  f.band_h = 2 * f.text + 3 * f.pad;  // two caption lines
  f.panel_w = f.pad + f.bar_w + f.pad + f.pad + f.label_w + f.pad;
  return f;
}

}  // namespace

OverlayLayout overlay_layout(int64_t width, int64_t height) {
  OverlayLayout l;
  l.scale = overlay_scale(width, height);
  l.film_width = width * l.scale;
  l.film_height = height * l.scale;
  const Furniture f = furniture(l.film_height);
  l.film_x = 0;
  l.film_y = f.band_h;
  l.width = l.film_width + f.panel_w;
  l.height = l.film_height + f.band_h;
  return l;
}

double overlay_colour_value(double normalised, double probability) {
  return std::clamp(normalised * std::clamp(probability, 0.0, 1.0), 0.0, 1.0);
}

DecodedImage heatmap_overlay(const DecodedImage& radiograph, const PatchMap& map, const OverlayCaption& caption,
                             const ImageRegion& region) {
  const DecodedImage rgb = to_decoded(to_rgb(radiograph));
  const OverlayLayout l = overlay_layout(rgb.width, rgb.height);
  const Furniture f = furniture(l.film_height);
  const int64_t scale = l.scale, w = l.width;
  DecodedImage image;
  image.width = l.width;
  image.height = l.height;
  image.channels = 3;
  image.pixels.assign(static_cast<size_t>(image.width * image.height * 3), 0);  // band and panel: black
  auto film_pixel = [&](int64_t x, int64_t y) {
    return &image.pixels[static_cast<size_t>(((y + l.film_y) * w + x + l.film_x) * 3)];
  };
  for (int64_t y = 0; y < l.film_height; ++y)  // nearest neighbour: every source pixel stays visible as it was
    for (int64_t x = 0; x < l.film_width; ++x)
      for (int k = 0; k < 3; ++k)
        film_pixel(x, y)[k] = rgb.pixels[static_cast<size_t>(((y / scale) * rgb.width + x / scale) * 3 + k)];
  // The map is drawn over the region (in film pixels, rounded to whole pixels), clipped to the film.
  const auto s = static_cast<double>(scale);
  const auto rx0 = static_cast<int64_t>(std::lround(region.x0 * s)),
             ry0 = static_cast<int64_t>(std::lround(region.y0 * s));
  const auto rx1 = static_cast<int64_t>(std::lround(region.x1 * s)),
             ry1 = static_cast<int64_t>(std::lround(region.y1 * s));
  VP_REQUIRE(rx1 > rx0 && ry1 > ry0, "explain: empty map region");
  const std::vector<float> m = normalised_map_at(map, rx1 - rx0, ry1 - ry0);
  for (int64_t y = 0; y < l.film_height; ++y)
    for (int64_t x = 0; x < l.film_width; ++x) {
      uint8_t* p = film_pixel(x, y);
      if (x < rx0 || x >= rx1 || y < ry0 || y >= ry1) {
        blend(p, Rgb{0, 0, 0}, 0.5);
        continue;
      }
      const double v =
          overlay_colour_value(m[static_cast<size_t>((y - ry0) * (rx1 - rx0) + (x - rx0))], caption.probability);
      blend(p, jet(v), 0.2 + 0.4 * v);
    }

  // The colour bar, in the panel right of the film: 1 at the top, 0 at the bottom, a tick at the probability (the
  // highest colour this map can reach).
  const int64_t bar_x = l.film_width + f.pad;
  const int64_t bar_y0 = l.film_y + f.pad + f.text / 2, bar_y1 = l.height - f.pad - f.text / 2;
  const int64_t bar_span = std::max<int64_t>(1, bar_y1 - bar_y0 - 1);
  for (int64_t y = bar_y0; y < bar_y1; ++y) {
    const Rgb c = jet(1.0 - static_cast<double>(y - bar_y0) / static_cast<double>(bar_span));
    for (int64_t x = bar_x; x < bar_x + f.bar_w; ++x) {
      uint8_t* p = &image.pixels[static_cast<size_t>((y * w + x) * 3)];
      p[0] = c.r, p[1] = c.g, p[2] = c.b;
    }
  }
  const int64_t label_x = bar_x + f.bar_w + 2 * f.pad;
  const auto p_y = bar_y0 + static_cast<int64_t>(std::lround((1.0 - overlay_colour_value(1.0, caption.probability)) *
                                                             static_cast<double>(bar_span)));
  for (int64_t x = bar_x; x < label_x - f.pad / 2; ++x)
    for (int64_t y = p_y; y < std::min(p_y + std::max<int64_t>(1, f.text / 8), l.height); ++y) {
      uint8_t* p = &image.pixels[static_cast<size_t>((y * w + x) * 3)];
      p[0] = p[1] = p[2] = 255;
    }
  draw_text(image, label_x, bar_y0 - f.text / 2, "1", f.text, Rgb{255, 255, 255});
  draw_text(image, label_x, bar_y1 - f.text / 2 - f.text / 2, "0", f.text, Rgb{255, 255, 255});
  draw_text(image, label_x, std::clamp(p_y - f.text / 2, bar_y0, bar_y1 - f.text), "p", f.text, Rgb{255, 255, 255});

  // The caption band above the film: what the map is of, and what its colours mean.
  char probability[32];
  std::snprintf(probability, sizeof probability, "%.3f", caption.probability);
  draw_text(image, f.pad, f.pad, caption.finding + "  p = " + probability + "  (" + caption.method + ")", f.text,
            Rgb{255, 255, 255});
  draw_text(image, f.pad, 2 * f.pad + f.text, "colour = map (0 at its min, 1 at its max) x p", f.text,
            Rgb{200, 200, 200});
  return image;
}

}  // namespace vitpipe
