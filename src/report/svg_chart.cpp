#include "report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace vitpipe {
namespace {

constexpr double kLeft = 48, kRight = 12, kTop = 26, kBottom = 38;  // plot margins (px)

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

// About five ticks at 1, 2 or 5 times a power of ten.
std::vector<double> ticks(double low, double high) {
  const double span = high - low;
  if (!(span > 0) || !std::isfinite(span)) return {low};
  const double raw = span / 5.0, power = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / power < 1.5   ? power
                      : raw / power < 3.5 ? 2 * power
                      : raw / power < 7.5 ? 5 * power
                                          : 10 * power;
  std::vector<double> out;
  for (double t = std::ceil(low / step - 1e-9) * step; t <= high + 1e-9 * span; t += step) {
    out.push_back(std::abs(t) < 1e-12 * span ? 0.0 : t);
  }
  return out;
}

std::string tick_label(double value, double span) {
  if (span >= 1000 || (std::abs(value) >= 10000 && value == std::floor(value))) return format("%.0f", value);
  if (std::abs(value) > 0 && (std::abs(value) < 1e-3 || std::abs(value) >= 1e5)) return format("%.0e", value);
  return format("%g", value);
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string svg_chart(const ChartSpec& s, size_t max_points) {
  const double w = s.width, h = s.height;
  const double pw = w - kLeft - kRight, ph = h - kTop - kBottom;
  const double xs = s.x_max > s.x_min ? pw / (s.x_max - s.x_min) : 1.0;
  const double ys = s.y_max > s.y_min ? ph / (s.y_max - s.y_min) : 1.0;
  auto X = [&](double x) { return kLeft + (std::clamp(x, s.x_min, s.x_max) - s.x_min) * xs; };
  auto Y = [&](double y) { return kTop + ph - (std::clamp(y, s.y_min, s.y_max) - s.y_min) * ys; };
  bool has_data = false;
  for (const ChartSeries& series : s.series) has_data = has_data || !series.points.empty();
  std::string out = "<svg class=\"chart\" id=\"" + html_escape(s.id) + "\"" +
                    (has_data ? std::string() : " data-empty=\"" + html_escape(s.empty_note) + "\"") +
                    " xmlns=\"http://www.w3.org/2000/svg\" width=\"" + format("%.0f", w) + "\" height=\"" +
                    format("%.0f", h) + "\" viewBox=\"0 0 " + format("%.0f", w) + " " + format("%.0f", h) +
                    "\" role=\"img\" aria-label=\"" + html_escape(s.title) + "\">\n";
  out +=
      "<text class=\"chart-title\" x=\"" + format("%.1f", kLeft) + "\" y=\"16\">" + html_escape(s.title) + "</text>\n";
  // Grid, ticks and axes.
  for (double t : ticks(s.x_min, s.x_max)) {
    out += "<line class=\"grid\" x1=\"" + format("%.1f", X(t)) + "\" y1=\"" + format("%.1f", kTop) + "\" x2=\"" +
           format("%.1f", X(t)) + "\" y2=\"" + format("%.1f", kTop + ph) + "\"/>";
    out += "<text class=\"tick\" x=\"" + format("%.1f", X(t)) + "\" y=\"" + format("%.1f", kTop + ph + 14) +
           "\" text-anchor=\"middle\">" + tick_label(t, s.x_max - s.x_min) + "</text>\n";
  }
  for (double t : ticks(s.y_min, s.y_max)) {
    out += "<line class=\"grid\" x1=\"" + format("%.1f", kLeft) + "\" y1=\"" + format("%.1f", Y(t)) + "\" x2=\"" +
           format("%.1f", kLeft + pw) + "\" y2=\"" + format("%.1f", Y(t)) + "\"/>";
    out += "<text class=\"tick\" x=\"" + format("%.1f", kLeft - 5) + "\" y=\"" + format("%.1f", Y(t) + 4) +
           "\" text-anchor=\"end\">" + tick_label(t, s.y_max - s.y_min) + "</text>\n";
  }
  out += "<rect class=\"frame\" x=\"" + format("%.1f", kLeft) + "\" y=\"" + format("%.1f", kTop) + "\" width=\"" +
         format("%.1f", pw) + "\" height=\"" + format("%.1f", ph) + "\"/>\n";
  out += "<text class=\"axis-label\" x=\"" + format("%.1f", kLeft + pw / 2) + "\" y=\"" + format("%.1f", h - 6) +
         "\" text-anchor=\"middle\">" + html_escape(s.x_label) + "</text>\n";
  out += "<text class=\"axis-label\" transform=\"translate(12," + format("%.1f", kTop + ph / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + html_escape(s.y_label) + "</text>\n";
  if (s.diagonal) {
    out += "<line class=\"reference\" x1=\"" + format("%.1f", X(s.x_min)) + "\" y1=\"" + format("%.1f", Y(s.y_min)) +
           "\" x2=\"" + format("%.1f", X(s.x_max)) + "\" y2=\"" + format("%.1f", Y(s.y_max)) + "\"/>\n";
  }
  // Series.
  for (const ChartSeries& series : s.series) {
    const size_t n = series.points.size();
    const size_t every = n > max_points ? (n + max_points - 1) / max_points : 1;
    std::string d;
    size_t drawn = 0;
    for (size_t i = 0; i < n; ++i) {
      if (i % every != 0 && i + 1 != n) continue;
      const auto& [x, y] = series.points[i];
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      d += drawn == 0 ? 'M' : 'L';  // appended piece by piece: GCC 12 warns falsely (-Wrestrict) on a + chain here
      d += format("%.2f", X(x));
      d += ',';
      d += format("%.2f", Y(y));
      ++drawn;
    }
    out += "<path class=\"series\" data-points=\"" + std::to_string(drawn) + "\" data-name=\"" +
           html_escape(series.name) + "\" d=\"" + d + "\" stroke=\"" + series.color + "\"" +
           (series.dashed ? " stroke-dasharray=\"5,3\"" : "") + "><title>" + html_escape(series.name) +
           "</title></path>\n";
    if (series.dots) {
      for (const auto& [x, y] : series.points) {
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        out += "<circle class=\"dot\" cx=\"" + format("%.2f", X(x)) + "\" cy=\"" + format("%.2f", Y(y)) +
               "\" r=\"2.6\" fill=\"" + series.color + "\"><title>" + html_escape(series.name) + ": " +
               format("%.4g", x) + ", " + format("%.4g", y) + "</title></circle>";
      }
      out += "\n";
    }
  }
  for (const ChartMarker& m : s.markers) {
    out += "<circle class=\"marker\" cx=\"" + format("%.2f", X(m.x)) + "\" cy=\"" + format("%.2f", Y(m.y)) +
           "\" r=\"4.5\" stroke=\"" + m.color + "\"/>";
    if (!m.label.empty()) {
      const bool right_half = X(m.x) > kLeft + pw * 0.6;
      out += "<text class=\"marker-label\" x=\"" + format("%.1f", X(m.x) + (right_half ? -7 : 7)) + "\" y=\"" +
             format("%.1f", Y(m.y) - 7) + "\" text-anchor=\"" + (right_half ? "end" : "start") + "\">" +
             html_escape(m.label) + "</text>";
    }
    out += "\n";
  }
  if (!has_data) {
    out += "<text class=\"axis-label\" x=\"" + format("%.1f", kLeft + pw / 2) + "\" y=\"" +
           format("%.1f", kTop + ph / 2) + "\" text-anchor=\"middle\">" + html_escape(s.empty_note) + "</text>\n";
  }
  // Legend: one line per named series, in a box in a corner of the plot.
  std::vector<const ChartSeries*> named;
  for (const ChartSeries& series : s.series) {
    if (!series.name.empty()) named.push_back(&series);
  }
  if (!named.empty()) {
    size_t longest = 0;
    for (const auto* series : named) longest = std::max(longest, series->name.size());
    const double lw = std::min(pw - 8, 26.0 + 6.2 * static_cast<double>(longest)), lh = 6.0 + 14.0 * named.size();
    const double lx = s.legend_left ? kLeft + 4 : kLeft + pw - lw - 4,
                 ly = s.legend_top ? kTop + 4 : kTop + ph - lh - 4;
    out += "<rect class=\"legend\" x=\"" + format("%.1f", lx) + "\" y=\"" + format("%.1f", ly) + "\" width=\"" +
           format("%.1f", lw) + "\" height=\"" + format("%.1f", lh) + "\"/>";
    for (size_t i = 0; i < named.size(); ++i) {
      const double y = ly + 13 + 14.0 * static_cast<double>(i);
      out += "<line x1=\"" + format("%.1f", lx + 5) + "\" y1=\"" + format("%.1f", y - 4) + "\" x2=\"" +
             format("%.1f", lx + 19) + "\" y2=\"" + format("%.1f", y - 4) + "\" stroke=\"" + named[i]->color +
             "\" stroke-width=\"2.5\"" + (named[i]->dashed ? " stroke-dasharray=\"5,3\"" : "") + "/>";
      out += "<text class=\"legend-text\" x=\"" + format("%.1f", lx + 23) + "\" y=\"" + format("%.1f", y) + "\">" +
             html_escape(named[i]->name) + "</text>";
    }
    out += "\n";
  }
  out += "</svg>\n";
  return out;
}

}  // namespace vitpipe
