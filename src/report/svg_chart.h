// Line charts as inline SVG, written by vitpipe itself: the report needs a handful of chart kinds (curves over
// steps, ROC/PR small multiples, a reliability diagram), and SVG text is exact (the numbers drawn are the numbers
// computed), needs no script and no network, and stays readable in any browser or printed. Colours are the
// Okabe-Ito palette, distinguishable with the common colour-vision deficiencies.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace vitpipe {

inline constexpr const char* kChartColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                               "#E69F00", "#56B4E9", "#000000", "#F0E442"};

struct ChartSeries {
  std::string name;  // legend text (empty: not in the legend)
  std::string color = kChartColors[0];
  std::vector<std::pair<double, double>> points{};
  bool dashed = false;
  bool dots = false;  // a marker at every point (few points: evaluations, calibration bins)
};

struct ChartMarker {
  double x = 0, y = 0;
  std::string color = kChartColors[6];
  std::string label;  // drawn beside the marker
};

struct ChartSpec {
  std::string id;  // the svg element's id
  std::string title, x_label, y_label;
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  int width = 340, height = 250;
  bool diagonal = false;     // the y = x reference line (ROC chance, perfect calibration)
  bool legend_top = false;   // legend in the top-right corner instead of the bottom-right
  bool legend_left = false;  // ... or in the left corner instead of the right
  std::vector<ChartSeries> series{};
  std::vector<ChartMarker> markers{};
  // Drawn in the plot, and set as the svg's data-empty attribute, when no series has a point: says why.
  std::string empty_note = "no data";
};

// Series longer than `max_points` are thinned for drawing (every k-th point, ends kept); each series' path carries
// data-points="N" (the points drawn), which the browser test checks.
std::string svg_chart(const ChartSpec& spec, size_t max_points = 600);

// Text for HTML/SVG content and attributes.
std::string html_escape(const std::string& text);

}  // namespace vitpipe
