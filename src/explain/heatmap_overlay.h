// What a reader sees: the map blended onto the radiograph at the image's own resolution (see kMinOverlaySide) (jet
// colours, the radiograph showing through), a colour bar at the right edge and a caption with the finding, its
// probability and the method.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/image.h"
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

DecodedImage heatmap_overlay(const DecodedImage& radiograph, const PatchMap& map, const OverlayCaption& caption);

}  // namespace vitpipe
