#include "evaluation/box_localization.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace vitpipe {

BoxScore score_box(std::span<const float> map, int64_t width, int64_t height, const FindingBox& box) {
  VP_REQUIRE(width > 0 && height > 0 && static_cast<int64_t>(map.size()) == width * height, "localization: a map of ",
             map.size(), " values for a ", width, " x ", height, " image");
  // The pixels whose centre (i + 0.5) lies in [x, x + w): columns [x0, x1), rows [y0, y1).
  auto first = [](double start) { return static_cast<int64_t>(std::ceil(start - 0.5)); };
  const int64_t x0 = std::clamp<int64_t>(first(box.x), 0, width),
                x1 = std::clamp<int64_t>(first(box.x + box.w), 0, width);
  const int64_t y0 = std::clamp<int64_t>(first(box.y), 0, height),
                y1 = std::clamp<int64_t>(first(box.y + box.h), 0, height);
  auto inside = [&](int64_t i, int64_t j) { return i >= x0 && i < x1 && j >= y0 && j < y1; };
  const auto top = std::max_element(map.begin(), map.end());
  const auto bottom = std::min_element(map.begin(), map.end());
  const int64_t at = top - map.begin();
  BoxScore s;
  s.hit = inside(at % width, at / width);
  const double level = *bottom + kDetectedLevel * (*top - *bottom);
  double total = 0, in_box = 0;
  int64_t region = 0, overlap = 0;
  const int64_t box_pixels = (x1 - x0) * (y1 - y0);
  for (int64_t j = 0; j < height; ++j) {
    for (int64_t i = 0; i < width; ++i) {
      const double v = map[static_cast<size_t>(j * width + i)];
      const bool in = inside(i, j);
      total += v;
      if (in) in_box += v;
      if (*top > *bottom && v >= level) {
        ++region;
        if (in) ++overlap;
      }
    }
  }
  s.mass_inside = total > 0 ? in_box / total : 0;
  if (region > 0) {
    s.iobb = static_cast<double>(overlap) / static_cast<double>(region);
    s.iou = static_cast<double>(overlap) / static_cast<double>(region + box_pixels - overlap);
  }
  return s;
}

namespace {

// The mean of `value` over the boxes, and its percentile interval over resampled boxes.
double mean_of(const std::vector<BoxScore>& scores, const std::function<double(const BoxScore&)>& value,
               const std::optional<BootstrapOptions>& bootstrap, std::optional<ConfidenceInterval>* ci) {
  double sum = 0;
  for (const auto& s : scores) sum += value(s);
  const double mean = scores.empty() ? 0 : sum / static_cast<double>(scores.size());
  if (bootstrap && !scores.empty()) {
    std::vector<double> means;
    for (int64_t b = 0; b < bootstrap->resamples; ++b) {
      const std::vector<uint32_t> counts = bootstrap_counts(static_cast<int64_t>(scores.size()), bootstrap->seed, b);
      double total = 0;
      for (size_t k = 0; k < scores.size(); ++k) total += counts[k] * value(scores[k]);
      means.push_back(total / static_cast<double>(scores.size()));
    }
    const double percent = 100.0 * bootstrap->confidence;
    ConfidenceInterval interval;
    interval.low = percentile(means, (100.0 - percent) / 2.0);
    interval.high = percentile(means, (100.0 + percent) / 2.0);
    interval.resamples = bootstrap->resamples;
    interval.unit = "box";
    *ci = interval;
  }
  return mean;
}

nlohmann::json value_json(double value, const std::optional<ConfidenceInterval>& ci) {
  nlohmann::json j = {{"value", value}, {"ci", nullptr}};
  if (ci) j["ci"] = {{"low", ci->low}, {"high", ci->high}, {"unit", ci->unit}, {"resamples", ci->resamples}};
  return j;
}

std::string threshold_key(double t) {
  char text[8];
  std::snprintf(text, sizeof(text), "%.1f", t);
  return text;
}

}  // namespace

LocalizationSummary summarize_boxes(const std::string& finding, const std::vector<BoxScore>& scores,
                                    const std::optional<BootstrapOptions>& bootstrap) {
  LocalizationSummary out;
  out.finding = finding;
  out.boxes = static_cast<int64_t>(scores.size());
  out.pointing = mean_of(
      scores, [](const BoxScore& s) { return s.hit ? 1.0 : 0.0; }, bootstrap, &out.pointing_ci);
  out.mass_inside = mean_of(
      scores, [](const BoxScore& s) { return s.mass_inside; }, bootstrap, &out.mass_inside_ci);
  for (const double t : kLocalizationThresholds) {
    out.t_iobb_ci.emplace_back();
    out.t_iou_ci.emplace_back();
    out.t_iobb.push_back(mean_of(
        scores, [t](const BoxScore& s) { return s.iobb > t ? 1.0 : 0.0; }, bootstrap, &out.t_iobb_ci.back()));
    out.t_iou.push_back(mean_of(
        scores, [t](const BoxScore& s) { return s.iou > t ? 1.0 : 0.0; }, bootstrap, &out.t_iou_ci.back()));
  }
  return out;
}

nlohmann::json localization_json(const LocalizationSummary& s) {
  nlohmann::json iobb = nlohmann::json::object(), iou = nlohmann::json::object();
  for (size_t k = 0; k < s.t_iobb.size(); ++k) {
    iobb[threshold_key(kLocalizationThresholds[k])] = value_json(s.t_iobb[k], s.t_iobb_ci[k]);
    iou[threshold_key(kLocalizationThresholds[k])] = value_json(s.t_iou[k], s.t_iou_ci[k]);
  }
  return {{"boxes", s.boxes},
          {"pointing_game", value_json(s.pointing, s.pointing_ci)},
          {"mass_inside", value_json(s.mass_inside, s.mass_inside_ci)},
          {"t_iobb", iobb},
          {"t_iou", iou}};
}

}  // namespace vitpipe
