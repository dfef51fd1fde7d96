// How well a heatmap points at a radiologist's box. The map is at the image's resolution (explain's
// normalised_map_at: scaled to [0, 1]); a pixel belongs to the box when its centre does. Per box: the pointing game
// (the map's maximum, the first in row-major order, lies in the box), the share of the map's mass inside the box,
// and for the region the map detects, Wang et al.'s (CVPR 2017) IoBB (|region and box| / |region|) and the IoU. The
// region is the pixels at or above kDetectedLevel of the map's range (Wang et al. threshold the normalised map; we
// score the thresholded pixels themselves rather than boxes drawn around them). T(IoBB) and T(IoU) at a threshold t:
// the share of boxes whose IoBB (IoU) exceeds t, for t = 0.1 .. 0.7.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "evaluation/box_list.h"
#include "evaluation/ranking_metrics.h"

namespace vitpipe {

constexpr double kDetectedLevel = 0.5;
inline constexpr double kLocalizationThresholds[] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7};

struct BoxScore {
  bool hit = false;        // pointing game
  double mass_inside = 0;  // share of the map's sum inside the box (0 for an all-zero map)
  double iobb = 0, iou = 0;
};

// `map`: width x height values >= 0, row-major. `box` in that image's pixels (box_in_image).
BoxScore score_box(std::span<const float> map, int64_t width, int64_t height, const FindingBox& box);

struct LocalizationSummary {
  std::string finding;
  int64_t boxes = 0;
  double pointing = 0, mass_inside = 0;
  std::vector<double> t_iobb, t_iou;  // at kLocalizationThresholds
  // 95% percentile intervals over resampled boxes (bootstrap), where asked for.
  std::optional<ConfidenceInterval> pointing_ci, mass_inside_ci;
  std::vector<std::optional<ConfidenceInterval>> t_iobb_ci, t_iou_ci;
};

// One finding's boxes; `bootstrap` (unit "box") resamples the boxes.
LocalizationSummary summarize_boxes(const std::string& finding, const std::vector<BoxScore>& scores,
                                    const std::optional<BootstrapOptions>& bootstrap);

// {"boxes", "pointing_game": {"value", "ci"}, "mass_inside": {...}, "t_iobb": {"0.1": {"value", "ci"}, ...},
// "t_iou": {...}}
nlohmann::json localization_json(const LocalizationSummary& summary);

}  // namespace vitpipe
