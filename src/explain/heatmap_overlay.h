// What a reader sees: the map blended onto the radiograph at the image's own resolution (see kMinOverlaySide) (jet
// colours, the radiograph showing through), a caption band above the film (the finding, its probability, the method
// and what the colours mean) and a colour bar in a panel beside it: nothing is drawn over the film but the map.
// Colours are on an absolute scale: the map divided by its maximum, times the finding's probability, so a finding
// the model gives p = 0.16 stays in the blues however peaked its map (min-max alone painted it red).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/image_processor.h"
#include "explain/model_explainer.h"

namespace vitpipe {

// The map resized to width x height, bilinear with half-pixel centres (as torch's interpolate with
// align_corners=False), then scaled to [0, 1] by its minimum and maximum (all zeros for a constant map).
std::vector<float> normalised_map_at(const PatchMap& map, int64_t width, int64_t height);

struct OverlayCaption {
  std::string finding;
  double probability = 0;
  std::string method;
};

// Images smaller than this (a 64-pixel thumbnail) are drawn at the smallest integer multiple reaching it, so the
// caption and colour bar fit; larger ones at their own size.
constexpr int64_t kMinOverlaySide = 256;
int64_t overlay_scale(int64_t width, int64_t height);

// `region`: where on the radiograph the map lies (ImageProcessor::input_region: the whole image, or a centre crop's
// place); outside it the radiograph is shown dimmed, without colour: the model did not see it.
// Where the film lies on the overlay canvas (the caption band above it, the colour-bar panel to its right).
struct OverlayLayout {
  int64_t scale = 1;               // overlay_scale
  int64_t film_x = 0, film_y = 0;  // top-left corner of the film
  int64_t film_width = 0, film_height = 0;
  int64_t width = 0, height = 0;  // the canvas
};
OverlayLayout overlay_layout(int64_t width, int64_t height);

// The colour value of a map value: `normalised` (normalised_map_at's [0, 1]) times the probability, clamped to [0, 1].
double overlay_colour_value(double normalised, double probability);

DecodedImage heatmap_overlay(const DecodedImage& radiograph, const PatchMap& map, const OverlayCaption& caption,
                             const ImageRegion& region);

}  // namespace vitpipe
