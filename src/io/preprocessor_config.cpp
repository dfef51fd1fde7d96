#include "io/preprocessor_config.h"

#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"

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

// `size` / `crop_size`: an int (old files: a square), {"height", "width"}, or {"shortest_edge": n} (for ViT and
// DeiT, a square n x n).
void read_size(const Json& value, const char* field, const std::string& source, int64_t* height, int64_t* width) {
  if (value.is_number()) {
    *height = *width = positive_size(value, field, source);
    return;
  }
  VP_REQUIRE(value.is_object(), source, ": field \"", field,
             "\" must be an integer or {\"height\": h, \"width\": w}, got ", describe(value));
  if (value.contains("height") || value.contains("width")) {
    VP_REQUIRE(value.contains("height") && value.contains("width"), source, ": field \"", field,
               "\" must give both \"height\" and \"width\", got ", describe(value));
    *height = positive_size(value["height"], concat(field, ".height"), source);
    *width = positive_size(value["width"], concat(field, ".width"), source);
    return;
  }
  VP_REQUIRE(value.contains("shortest_edge"), source, ": field \"", field,
             "\" must be {\"height\": h, \"width\": w} or {\"shortest_edge\": n}, got ", describe(value));
  *height = *width = positive_size(value["shortest_edge"], concat(field, ".shortest_edge"), source);
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

PreprocessorConfig parse_preprocessor_config_text(const std::string& text, const std::string& source) {
  Json json;
  try {
    json = Json::parse(text);
  } catch (const Json::exception& e) {
    fail(source, ": not valid JSON: ", e.what());
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
  if (config.image_processor_type != "ViTImageProcessor" && config.image_processor_type != "DeiTImageProcessor") {
    warn(source, ": image processor \"", config.image_processor_type,
         "\" is read as a ViTImageProcessor (resize, rescale, normalize)");
  }

  config.do_resize = read_bool(json, "do_resize", config.do_resize, source);
  if (json.contains("size")) read_size(json["size"], "size", source, &config.height, &config.width);
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
  config.do_center_crop = read_bool(json, "do_center_crop", config.do_center_crop, source);
  if (json.contains("crop_size")) {
    read_size(json["crop_size"], "crop_size", source, &config.crop_height, &config.crop_width);
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
  json["size"] = {{"height", config.height}, {"width", config.width}};
  if (!config.vitpipe_intensity.is_null()) json["vitpipe_intensity"] = config.vitpipe_intensity;
  if (config.do_center_crop) {
    json["image_processor_type"] = "DeiTImageProcessor";
    json["do_center_crop"] = true;
    json["crop_size"] = {{"height", config.crop_height}, {"width", config.crop_width}};
  } else {
    json["image_processor_type"] = "ViTImageProcessor";
  }
  return json.dump(2) + "\n";
}

void write_preprocessor_config(const std::filesystem::path& path, const PreprocessorConfig& config) {
  write_text_file_atomically(path, preprocessor_config_text(config));
}

}  // namespace vitpipe
