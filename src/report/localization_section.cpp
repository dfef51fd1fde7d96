#include "report/localization_section.h"

#include <cstdio>

#include "report/svg_chart.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_error_detail.h"

namespace vitpipe {
namespace {

constexpr const char* kThresholdKeys[] = {"0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7"};

std::string num(double value, const char* pattern = "%.3f") {
  char text[40];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

// A {"value", "ci": {"low", "high"} | null} metric, checked, as "0.600 (0.200-1.000)".
std::string metric_text(const nlohmann::json& metric, const std::string& where) {
  VP_REQUIRE(metric.is_object() && metric.contains("value") && metric["value"].is_number(), where,
             ": expected {\"value\": number, \"ci\": ...}");
  std::string text = num(metric["value"].get<double>());
  const nlohmann::json ci = metric.value("ci", nlohmann::json());
  if (!ci.is_null()) {
    VP_REQUIRE(
        ci.is_object() && ci.contains("low") && ci["low"].is_number() && ci.contains("high") && ci["high"].is_number(),
        where, " \"ci\": expected {\"low\": number, \"high\": number}");
    text += " (" + num(ci["low"].get<double>()) + "-" + num(ci["high"].get<double>()) + ")";
  }
  return text;
}

std::string cell(const std::string& text) { return "<td>" + html_escape(text) + "</td>"; }

}  // namespace

LocalizationFile read_localization_file(const std::filesystem::path& path) {
  LocalizationFile file;
  file.path = path;
  const std::string text = read_text_file(path);
  try {
    file.data = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path.string(), ": not valid JSON", json_error_detail(e, text));
  }
  const nlohmann::json& d = file.data;
  const std::string where = path.string();
  VP_REQUIRE(d.is_object() && d.value("format", "") == kLocalizationFormat, where, ": field \"format\": expected \"",
             kLocalizationFormat, "\" (a file vitpipe eval --save-localization wrote)");
  VP_REQUIRE(d.contains("version") && d["version"] == 1, where, ": field \"version\": expected 1");
  VP_REQUIRE(d.contains("boxes") && d["boxes"].is_number_integer() && d["boxes"].get<int64_t>() >= 0, where,
             ": field \"boxes\": expected a count of boxes");
  VP_REQUIRE(d.contains("per_finding") && d["per_finding"].is_object(), where,
             ": field \"per_finding\": expected an object of findings");
  for (const auto& [finding, f] : d["per_finding"].items()) {
    const std::string at = where + ": per_finding \"" + finding + "\"";
    VP_REQUIRE(f.is_object() && f.contains("boxes") && f["boxes"].is_number_integer(), at,
               ": field \"boxes\": expected a count");
    metric_text(f.value("pointing_game", nlohmann::json()), at + " \"pointing_game\"");
    VP_REQUIRE(f.contains("t_iobb") && f["t_iobb"].is_object(), at, ": field \"t_iobb\": expected an object");
    for (const char* key : kThresholdKeys)
      metric_text(f["t_iobb"].value(key, nlohmann::json()), at + " \"t_iobb\" \"" + key + "\"");
  }
  for (const auto& w : d.value("worst_images", nlohmann::json::array())) {
    VP_REQUIRE(w.is_object() && w.value("overlay_png", nlohmann::json()).is_string() &&
                   w.value("image", nlohmann::json()).is_string() && w.value("finding", nlohmann::json()).is_string(),
               where, ": field \"worst_images\": expected objects with \"image\", \"finding\" and \"overlay_png\"");
    const std::string png = w["overlay_png"].get<std::string>();  // goes into the page as it is: base64 only
    VP_REQUIRE(
        png.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") == std::string::npos,
        where, ": field \"worst_images\" \"overlay_png\": expected base64 PNG data");
  }
  return file;
}

std::string localization_section(const std::optional<LocalizationFile>& file) {
  std::string out = "<section id=\"localization\"><h2>Localization on radiologists' boxes</h2>\n";
  if (!file) {
    return out +
           "<p class=\"note\" id=\"localization-not-evaluated\">Not evaluated: no radiologists' boxes were scored. "
           "<code>vitpipe eval --model RUN_DIR/model --data SPEC --split test --boxes BBox_List_2017.csv "
           "--bootstrap 1000 --save-localization RUN_DIR/localization-test.json</code> scores the heatmaps on NIH's "
           "boxes; the report of the run then shows them.</p></section>\n";
  }
  const nlohmann::json& d = file->data;
  const std::string split = d.value("split", "");
  std::string skipped;
  const nlohmann::json skipped_boxes = d.value("skipped", nlohmann::json::object());
  for (const auto& [reason, n] : skipped_boxes.items())
    skipped += (skipped.empty() ? "" : "; ") + n.dump() + " " + reason;
  out += "<p class=\"note\">" + html_escape(d["boxes"].dump()) + " boxes of the " + html_escape(split) +
         " split scored against the " + html_escape(d.value("method", "")) + " map of their finding (" +
         html_escape(file->path.filename().string()) +
         "). Pointing game: the map's maximum lies in the box. T(IoBB) at t (Wang et al., CVPR 2017): the share of "
         "boxes whose overlap with the detected region (the pixels at or above half the map's range) over that "
         "region's area exceeds t. In brackets the 95% interval over resampled boxes, where the evaluation drew "
         "them. A handful of boxes per finding says little." +
         (skipped.empty() ? std::string() : " Skipped: " + html_escape(skipped) + ".") + "</p>\n";
  out += "<table id=\"localization-table\"><thead><tr><th>finding</th><th>boxes</th><th>pointing game</th>";
  for (const char* key : kThresholdKeys) out += std::string("<th>T(IoBB) &gt; ") + key + "</th>";
  out += "</tr></thead><tbody>\n";
  for (const auto& [finding, f] : d["per_finding"].items()) {
    out += "<tr>" + cell(finding) + cell(f["boxes"].dump()) + cell(metric_text(f["pointing_game"], finding));
    for (const char* key : kThresholdKeys) out += cell(metric_text(f["t_iobb"][key], finding));
    out += "</tr>\n";
  }
  out += "</tbody></table>\n";
  const nlohmann::json worst = d.value("worst_images", nlohmann::json::array());
  if (!worst.empty()) {
    out +=
        "<h3>Worst-localized boxes</h3>\n<p class=\"note\">The box (white outline) over the map of its finding; "
        "pointing misses first, then the lowest IoBB.</p>\n<div class=\"heatmaps\" id=\"localization-images\">\n";
    for (const auto& w : worst) {
      const std::string caption = w["image"].get<std::string>() + ": " + w["finding"].get<std::string>() +
                                  (w.value("pointing_hit", false) ? ", pointing hit" : ", pointing miss") + ", IoBB " +
                                  num(w.value("iobb", 0.0)) + ", p = " + num(w.value("probability", 0.0));
      out += "<figure><img alt=\"" +
             html_escape(w["finding"].get<std::string>() + " box on " + w["image"].get<std::string>()) +
             "\" src=\"data:image/png;base64," + w["overlay_png"].get<std::string>() + "\"><figcaption>" +
             html_escape(caption) + "</figcaption></figure>\n";
    }
    out += "</div>\n";
  }
  return out + "</section>\n";
}

nlohmann::json localization_summary_json(const LocalizationFile& file) {
  nlohmann::json out = file.data;
  if (out.contains("worst_images"))
    for (auto& w : out["worst_images"]) w.erase("overlay_png");
  return out;
}

}  // namespace vitpipe
