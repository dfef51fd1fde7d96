#include "io/preprocessor_config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <tuple>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_error_detail.h"
#include "util/log.h"
#include "util/size_limits.h"

namespace vitpipe {
namespace {

using Json = nlohmann::json;

std::string describe(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return concat(value.type_name(), " ", text);
}

bool read_bool(const Json& json, const char* key, bool fallback, const std::string& source) {
  if (!json.contains(key)) return fallback;
  VP_REQUIRE(json[key].is_boolean(), source, ": field \"", key, "\" must be true or false, got ", describe(json[key]));
  return json[key].get<bool>();
}

int64_t positive_size(const Json& value, const std::string& field, const std::string& source) {
  VP_REQUIRE(value.is_number_integer() && value.get<int64_t>() > 0 && value.get<int64_t>() <= 1'000'000, source,
             ": field \"", field, "\" must be a positive integer, got ", describe(value));
  return value.get<int64_t>();
}

// `size` / `crop_size`: an int (old files: a square; BitImageProcessor's size: the shortest edge),
// {"height", "width"}, or {"shortest_edge": n} (BitImageProcessor: the shortest edge; ViT and DeiT: n x n).
void read_size(const Json& value, const char* field, const std::string& source, bool shortest_edge_semantics,
               PreprocessorConfig* config, bool crop) {
  int64_t* height = crop ? &config->crop_height : &config->height;
  int64_t* width = crop ? &config->crop_width : &config->width;
  auto shortest = [&](int64_t n) {
    config->resize_mode = ResizeMode::shortest_edge;
    config->shortest_edge = n;
  };
  if (value.is_number()) {
    const int64_t n = positive_size(value, field, source);
    if (shortest_edge_semantics && !crop) {
      shortest(n);
    } else {
      *height = *width = n;
      if (!crop) config->resize_mode = ResizeMode::exact;
    }
    return;
  }
  VP_REQUIRE(value.is_object(), source, ": field \"", field,
             "\" must be an integer or {\"height\": h, \"width\": w}, got ", describe(value));
  if (value.contains("height") || value.contains("width")) {
    VP_REQUIRE(value.contains("height") && value.contains("width"), source, ": field \"", field,
               "\" must give both \"height\" and \"width\", got ", describe(value));
    *height = positive_size(value["height"], concat(field, ".height"), source);
    *width = positive_size(value["width"], concat(field, ".width"), source);
    if (!crop) config->resize_mode = ResizeMode::exact;
    return;
  }
  VP_REQUIRE(value.contains("shortest_edge"), source, ": field \"", field,
             "\" must be {\"height\": h, \"width\": w} or {\"shortest_edge\": n}, got ", describe(value));
  const int64_t n = positive_size(value["shortest_edge"], concat(field, ".shortest_edge"), source);
  if (shortest_edge_semantics && !crop) {
    shortest(n);
  } else {
    *height = *width = n;
    if (!crop) config->resize_mode = ResizeMode::exact;
  }
}

std::array<double, 3> read_channels(const Json& value, const char* field, const std::string& source) {
  auto number = [&](const Json& v) {
    VP_REQUIRE(v.is_number(), source, ": field \"", field, "\" must hold numbers, got ", describe(v));
    return v.get<double>();
  };
  if (value.is_number()) {
    double x = number(value);
    return {x, x, x};
  }
  VP_REQUIRE(value.is_array() && (value.size() == 3 || value.size() == 1), source, ": field \"", field,
             "\" must be 3 numbers (one per channel) or one number, got ", describe(value));
  if (value.size() == 1) {
    double x = number(value[0]);
    return {x, x, x};
  }
  return {number(value[0]), number(value[1]), number(value[2])};
}

}  // namespace

PreprocessorConfig default_preprocessor_config(int64_t image_size) {
  PreprocessorConfig config;
  config.height = config.width = image_size;
  return config;
}

std::pair<int64_t, int64_t> PreprocessorConfig::resized_size(int64_t input_width, int64_t input_height) const {
  if (!do_resize) return {input_width, input_height};
  if (resize_mode == ResizeMode::exact) return {width, height};
  // transformers' get_resize_output_image_size(default_to_square=False): int(size * long / short) in float.
  const int64_t short_side = std::min(input_width, input_height), long_side = std::max(input_width, input_height);
  const int64_t new_long =
      static_cast<int64_t>(static_cast<double>(shortest_edge * long_side) / static_cast<double>(short_side));
  return input_width <= input_height ? std::make_pair(shortest_edge, new_long)
                                     : std::make_pair(new_long, shortest_edge);
}

std::pair<int64_t, int64_t> PreprocessorConfig::fixed_output_size() const {
  if (do_center_crop) return {crop_width, crop_height};
  if (do_resize && resize_mode == ResizeMode::exact) return {width, height};
  return {0, 0};
}

std::string PreprocessorConfig::geometry() const {
  std::string text = "no resize";
  if (do_resize) {
    text = resize_mode == ResizeMode::exact ? concat("resize ", width, "x", height)
                                            : concat("resize shortest edge ", shortest_edge);
    text += concat(" resample ", resample);
  }
  if (do_center_crop) text += concat(", crop ", crop_width, "x", crop_height);
  return text;
}

PreprocessorConfig parse_preprocessor_config_text(const std::string& text, const std::string& source) {
  Json json;
  try {
    json = Json::parse(text);
  } catch (const Json::exception& e) {
    fail(source, ": not valid JSON", json_error_detail(e, text));
  }
  VP_REQUIRE(json.is_object(), source, ": expected a JSON object, got ", json.type_name());
  PreprocessorConfig config;

  for (const char* key : {"image_processor_type", "feature_extractor_type"}) {
    if (json.contains(key) && !json[key].is_null()) {
      VP_REQUIRE(json[key].is_string(), source, ": field \"", key, "\" must be a string, got ", describe(json[key]));
      config.image_processor_type = json[key].get<std::string>();
      break;
    }
  }
  // Old files say ViTFeatureExtractor / DeiTFeatureExtractor: the same preprocessing under an older name.
  const std::string& type = config.image_processor_type;
  if (type.size() > 16 && type.compare(type.size() - 16, 16, "FeatureExtractor") == 0) {
    config.image_processor_type = type.substr(0, type.size() - 16) + "ImageProcessor";
  }
  const bool bit = config.image_processor_type == "BitImageProcessor";
  const bool deit = config.image_processor_type == "DeiTImageProcessor";
  if (!bit && !deit && config.image_processor_type != "ViTImageProcessor") {
    warn(source, ": image processor \"", config.image_processor_type,
         "\" is read as a ViTImageProcessor (resize, rescale, normalize)");
    config.image_processor_type = "ViTImageProcessor";
  }
  // The class defaults (transformers' __init__ arguments) for absent fields.
  if (bit) {  // BitImageProcessor: shortest edge 224, bicubic, crop 224, OpenAI CLIP mean/std
    config.resize_mode = ResizeMode::shortest_edge;
    config.shortest_edge = 224;
    config.resample = 3;
    config.do_center_crop = true;
    config.crop_height = config.crop_width = 224;
    config.image_mean = {0.48145466, 0.4578275, 0.40821073};
    config.image_std = {0.26862954, 0.26130258, 0.27577711};
  } else if (deit) {  // DeiTImageProcessor: 256 x 256, bicubic, crop 224, mean = std = 0.5
    config.height = config.width = 256;
    config.resample = 3;
    config.do_center_crop = true;
  }

  config.do_resize = read_bool(json, "do_resize", config.do_resize, source);
  if (json.contains("size")) read_size(json["size"], "size", source, bit, &config, false);
  if (json.contains("resample")) {
    const Json& value = json["resample"];
    VP_REQUIRE(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() <= 5, source,
               ": field \"resample\" must be a PIL filter id 0..5 (2 = bilinear), got ", describe(value));
    config.resample = value.get<int>();
  }
  config.do_rescale = read_bool(json, "do_rescale", config.do_rescale, source);
  if (json.contains("rescale_factor")) {
    const Json& value = json["rescale_factor"];
    VP_REQUIRE(value.is_number() && value.get<double>() > 0, source,
               ": field \"rescale_factor\" must be a positive number, got ", describe(value));
    config.rescale_factor = value.get<double>();
  }
  config.do_normalize = read_bool(json, "do_normalize", config.do_normalize, source);
  if (json.contains("image_mean")) config.image_mean = read_channels(json["image_mean"], "image_mean", source);
  if (json.contains("image_std")) config.image_std = read_channels(json["image_std"], "image_std", source);
  for (double s : config.image_std) {
    VP_REQUIRE(s > 0, source, ": field \"image_std\" must be positive, got ", s);
  }
  config.do_convert_rgb = read_bool(json, "do_convert_rgb", config.do_convert_rgb, source);
  config.do_center_crop = read_bool(json, "do_center_crop", config.do_center_crop, source);
  if (json.contains("crop_size")) read_size(json["crop_size"], "crop_size", source, false, &config, true);
  if (config.do_center_crop && !bit && !deit) {
    warn(source, ": ViTImageProcessor does not crop (transformers ignores \"do_center_crop\"); neither does vitpipe");
    config.do_center_crop = false;
  }
  if (config.do_center_crop && config.do_resize) {
    if (config.resize_mode == ResizeMode::exact) {
      VP_REQUIRE(config.crop_height <= config.height && config.crop_width <= config.width, source, ": \"crop_size\" ",
                 config.crop_width, "x", config.crop_height, " is larger than the resize to ", config.width, "x",
                 config.height, " (\"size\"); the crop must fit inside the resized image");
    } else {
      VP_REQUIRE(std::max(config.crop_height, config.crop_width) <= config.shortest_edge, source, ": \"crop_size\" ",
                 config.crop_width, "x", config.crop_height, " is larger than the resize (\"size\": shortest edge ",
                 config.shortest_edge, "); the crop must fit inside the resized image");
    }
  }
  if (config.resize_mode == ResizeMode::shortest_edge) config.height = config.width = config.shortest_edge;
  // Every input image is resized to this: a buffer of that many pixels per image.
  const int64_t max_pixels = max_image_pixels();
  for (auto [field, h, w] : {std::tuple{"size", config.height, config.width},
                             std::tuple{"crop_size", config.crop_height, config.crop_width}}) {
    VP_REQUIRE(h * w <= max_pixels, source, ": field \"", field, "\" asks for ", h, "x", w,
               " pixels, more than the limit of ", max_pixels, " (set VITPIPE_MAX_IMAGE_PIXELS to raise it)");
  }
  if (json.contains("vitpipe_intensity") && !json["vitpipe_intensity"].is_null()) {
    VP_REQUIRE(json["vitpipe_intensity"].is_object(), source, ": field \"vitpipe_intensity\" must be an object, got ",
               describe(json["vitpipe_intensity"]));
    config.vitpipe_intensity = json["vitpipe_intensity"];
  }
  return config;
}

PreprocessorConfig read_preprocessor_config(const std::filesystem::path& path) {
  return parse_preprocessor_config_text(read_text_file(path), path.string());
}

std::string preprocessor_config_text(const PreprocessorConfig& config) {
  Json json = Json::object();
  json["do_normalize"] = config.do_normalize;
  json["do_rescale"] = config.do_rescale;
  json["do_resize"] = config.do_resize;
  json["image_mean"] = config.image_mean;
  json["image_std"] = config.image_std;
  json["resample"] = config.resample;
  json["rescale_factor"] = config.rescale_factor;
  if (config.resize_mode == ResizeMode::shortest_edge) {
    json["size"] = {{"shortest_edge", config.shortest_edge}};
  } else {
    json["size"] = {{"height", config.height}, {"width", config.width}};
  }
  if (!config.vitpipe_intensity.is_null()) json["vitpipe_intensity"] = config.vitpipe_intensity;
  if (config.image_processor_type == "BitImageProcessor") {
    json["image_processor_type"] = "BitImageProcessor";
    json["do_center_crop"] = config.do_center_crop;
    json["do_convert_rgb"] = config.do_convert_rgb;
    json["crop_size"] = {{"height", config.crop_height}, {"width", config.crop_width}};
  } else if (config.do_center_crop) {
    json["image_processor_type"] = "DeiTImageProcessor";
    json["do_center_crop"] = true;
    json["crop_size"] = {{"height", config.crop_height}, {"width", config.crop_width}};
  } else {
    json["image_processor_type"] = "ViTImageProcessor";
  }
  return json.dump(2) + "\n";
}

PreprocessorConfig preprocessor_for_image_size(const PreprocessorConfig& config, int64_t image_size) {
  PreprocessorConfig p = config;
  if (p.do_center_crop) {
    // Keep the resize:crop ratio (DeiT and DINOv2: 256 -> 224).
    const double ratio = static_cast<double>(image_size) / static_cast<double>(p.crop_height);
    if (p.resize_mode == ResizeMode::shortest_edge) {
      p.shortest_edge = std::llround(static_cast<double>(p.shortest_edge) * ratio);
      p.height = p.width = p.shortest_edge;
    } else {
      p.height = std::llround(static_cast<double>(p.height) * ratio);
      p.width = std::llround(static_cast<double>(p.width) * image_size / static_cast<double>(p.crop_width));
    }
    p.crop_height = p.crop_width = image_size;
  } else if (p.resize_mode == ResizeMode::shortest_edge) {
    p.shortest_edge = p.height = p.width = image_size;
  } else {
    p.height = p.width = image_size;
  }
  return p;
}

void write_preprocessor_config(const std::filesystem::path& path, const PreprocessorConfig& config) {
  write_text_file_atomically(path, preprocessor_config_text(config));
}

}  // namespace vitpipe
