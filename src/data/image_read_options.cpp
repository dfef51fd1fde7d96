#include "data/image_read_options.h"

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/error.h"

namespace vitpipe {
namespace {

constexpr const char* kPolicies = "auto, pillow, full-range, window:C,W or percentile:LO,HI";

bool parse_number(std::string_view text, double* value) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (text.empty()) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size() && std::isfinite(*value);
}

// "A,B" -> two numbers.
bool parse_pair(std::string_view text, double* a, double* b) {
  const size_t comma = text.find(',');
  if (comma == std::string_view::npos) return false;
  return parse_number(text.substr(0, comma), a) && parse_number(text.substr(comma + 1), b);
}

// Shortest text that reads back as the same double.
std::string number_text(double value) {
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return error == std::errc() ? std::string(buffer, end) : std::to_string(value);
}

}  // namespace

IntensityPolicy parse_intensity_policy(std::string_view text, const std::string& where) {
  IntensityPolicy policy;
  if (text == "auto") return policy;
  if (text == "pillow") {
    policy.kind = IntensityKind::pillow;
    return policy;
  }
  if (text == "full-range") {
    policy.kind = IntensityKind::full_range;
    return policy;
  }
  const size_t colon = text.find(':');
  const std::string_view head = text.substr(0, colon);
  if (colon != std::string_view::npos && head == "window") {
    policy.kind = IntensityKind::window;
    VP_REQUIRE(parse_pair(text.substr(colon + 1), &policy.first, &policy.second) && policy.second >= 1, where, ": \"",
               text, "\" is not a window (expected window:CENTRE,WIDTH with WIDTH >= 1, e.g. window:2048,4096)");
    return policy;
  }
  if (colon != std::string_view::npos && head == "percentile") {
    policy.kind = IntensityKind::percentile;
    VP_REQUIRE(parse_pair(text.substr(colon + 1), &policy.first, &policy.second) && policy.first >= 0 &&
                   policy.first < policy.second && policy.second <= 100,
               where, ": \"", text,
               "\" is not a percentile range (expected percentile:LO,HI with 0 <= LO < HI <= 100, ",
               "e.g. percentile:0.5,99.5)");
    return policy;
  }
  fail(where, ": unknown intensity policy \"", text, "\" (expected ", kPolicies, ")");
}

std::string intensity_policy_name(const IntensityPolicy& policy) {
  switch (policy.kind) {
    case IntensityKind::automatic:
      return "auto";
    case IntensityKind::pillow:
      return "pillow";
    case IntensityKind::full_range:
      return "full-range";
    case IntensityKind::window:
      return "window:" + number_text(policy.first) + "," + number_text(policy.second);
    case IntensityKind::percentile:
      return "percentile:" + number_text(policy.first) + "," + number_text(policy.second);
  }
  return "auto";
}

DicomWindowChoice parse_dicom_window(std::string_view text, const std::string& where) {
  DicomWindowChoice choice;
  if (text == "first") return choice;
  if (text == "minmax") {
    choice.kind = DicomWindowKind::minmax;
    return choice;
  }
  int index = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), index);
  VP_REQUIRE(!text.empty() && error == std::errc() && end == text.data() + text.size() && index >= 1, where, ": \"",
             text, "\" is not a DICOM window choice (expected first, minmax or a 1-based window number)");
  choice.kind = DicomWindowKind::index;
  choice.index = index;
  return choice;
}

std::string dicom_window_name(const DicomWindowChoice& choice) {
  switch (choice.kind) {
    case DicomWindowKind::first:
      return "first";
    case DicomWindowKind::minmax:
      return "minmax";
    case DicomWindowKind::index:
      return std::to_string(choice.index);
  }
  return "first";
}

std::string describe_image_read_options(const ImageReadOptions& options) {
  std::string text = "intensity " + intensity_policy_name(options.intensity) + ", dicom window " +
                     dicom_window_name(options.dicom_window);
  if (options.dicom_first_frame) text += ", dicom first frame";
  return text;
}

nlohmann::json image_read_options_json(const ImageReadOptions& options) {
  nlohmann::json j = {{"intensity", intensity_policy_name(options.intensity)},
                      {"dicom_window", dicom_window_name(options.dicom_window)}};
  if (options.dicom_first_frame) j["dicom_first_frame"] = true;
  return j;
}

ImageReadOptions parse_image_read_options_json(const nlohmann::json& value, const std::string& where) {
  VP_REQUIRE(value.is_object(), where,
             ": expected an object like {\"intensity\": \"auto\", \"dicom_window\": ", "\"first\"}, got ",
             value.dump());
  ImageReadOptions options;
  for (const auto& [key, field] : value.items()) {
    const std::string at = where + " field \"" + key + "\"";
    if (key == "intensity") {
      VP_REQUIRE(field.is_string(), at, ": expected a string (", kPolicies, ")");
      options.intensity = parse_intensity_policy(field.get<std::string>(), at);
    } else if (key == "dicom_window") {
      VP_REQUIRE(field.is_string(), at, ": expected a string (first, minmax or a window number)");
      options.dicom_window = parse_dicom_window(field.get<std::string>(), at);
    } else if (key == "dicom_first_frame") {
      VP_REQUIRE(field.is_boolean(), at, ": expected true or false");
      options.dicom_first_frame = field.get<bool>();
    } else {
      fail(at, ": unknown key (expected intensity, dicom_window, dicom_first_frame)");
    }
  }
  return options;
}

ImageReadOptions image_read_options_of(const PreprocessorConfig& config, const std::string& source) {
  if (config.vitpipe_intensity.is_null()) return {};
  return parse_image_read_options_json(config.vitpipe_intensity, source + " field \"vitpipe_intensity\"");
}

}  // namespace vitpipe
