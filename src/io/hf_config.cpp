#include "io/hf_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "model/model_family.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_error_detail.h"
#include "util/log.h"

namespace vitpipe {
namespace {

using Json = nlohmann::json;

// Keys this file reads or writes; everything else in a config.json is "extra" and survives a rewrite.
const std::set<std::string>& known_keys() {
  static const std::set<std::string> keys = {"hidden_size",
                                             "num_hidden_layers",
                                             "num_attention_heads",
                                             "intermediate_size",
                                             "hidden_act",
                                             "layer_norm_eps",
                                             "image_size",
                                             "patch_size",
                                             "num_channels",
                                             "qkv_bias",
                                             "initializer_range",
                                             "id2label",
                                             "label2id",
                                             "num_labels",
                                             "problem_type",
                                             "architectures",
                                             "model_type",
                                             "torch_dtype",
                                             "dtype",
                                             "hidden_dropout_prob",
                                             "attention_probs_dropout_prob",
                                             "encoder_stride",
                                             "transformers_version",
                                             "mlp_ratio",
                                             "layerscale_value",
                                             "use_swiglu_ffn",
                                             "use_mask_token",
                                             "num_register_tokens",
                                             "drop_path_rate"};
  return keys;
}

const std::set<std::string>& known_architectures() {
  static const std::set<std::string> names = {"ViTForImageClassification",
                                              "ViTModel",
                                              "DeiTForImageClassification",
                                              "DeiTForImageClassificationWithTeacher",
                                              "DeiTModel",
                                              "Dinov2ForImageClassification",
                                              "Dinov2Model",
                                              "Dinov2Backbone",
                                              "Dinov2WithRegistersForImageClassification",
                                              "Dinov2WithRegistersModel",
                                              "Dinov2WithRegistersBackbone"};
  return names;
}

std::string describe(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return concat(value.type_name(), " ", text);
}

class Fields {
 public:
  Fields(const Json& json, const std::string& source) : json_(json), source_(source) {}

  bool has(const char* key) const { return json_.contains(key); }

  int64_t integer(const char* key, int64_t fallback) const {
    if (!has(key)) return fallback;
    const Json& value = json_[key];
    VP_REQUIRE(value.is_number_integer(), source_, ": field \"", key, "\" must be an integer, got ", describe(value));
    return value.get<int64_t>();
  }
  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const Json& value = json_[key];
    VP_REQUIRE(value.is_number(), source_, ": field \"", key, "\" must be a number, got ", describe(value));
    return value.get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const Json& value = json_[key];
    VP_REQUIRE(value.is_boolean(), source_, ": field \"", key, "\" must be true or false, got ", describe(value));
    return value.get<bool>();
  }
  // Absent or null: `fallback`.
  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key) || json_[key].is_null()) return fallback;
    const Json& value = json_[key];
    VP_REQUIRE(value.is_string(), source_, ": field \"", key, "\" must be a string, got ", describe(value));
    return value.get<std::string>();
  }

 private:
  const Json& json_;
  const std::string& source_;
};

// id2label keys are the decimal ids "0".."n-1", each exactly once.
std::vector<std::string> parse_id2label(const Json& id2label, const std::string& source) {
  VP_REQUIRE(id2label.is_object(), source, ": field \"id2label\" must be an object {\"0\": label, ...}, got ",
             describe(id2label));
  const size_t count = id2label.size();
  VP_REQUIRE(count > 0, source, ": field \"id2label\" is empty");
  std::vector<std::string> labels(count);
  std::vector<bool> seen(count, false);
  for (const auto& [key, value] : id2label.items()) {
    bool canonical = !key.empty() && key.size() <= 18 &&
                     std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) &&
                     (key == "0" || key[0] != '0');
    VP_REQUIRE(canonical, source, ": id2label key \"", key, "\" is not a label id (expected \"0\"..\"", count - 1,
               "\")");
    size_t id = std::stoull(key);
    VP_REQUIRE(id < count, source, ": id2label key \"", key, "\" is out of range: ", count,
               " labels must use ids \"0\"..\"", count - 1, "\"");
    VP_REQUIRE(value.is_string(), source, ": id2label[\"", key, "\"] must be a string, got ", describe(value));
    labels[id] = value.get<std::string>();
    seen[id] = true;
  }
  for (size_t id = 0; id < count; ++id) {
    VP_REQUIRE(seen[id], source, ": id2label has no entry for id \"", id, "\"");
  }
  return labels;
}

// label2id must map every label to an id that id2label gives that name. Duplicate names (ImageNet has two
// "crane"s) keep one id, as Python's dict does, so only agreement is checked, not a bijection.
void check_label2id(const Json& label2id, const std::vector<std::string>& labels, const std::string& source) {
  VP_REQUIRE(label2id.is_object(), source, ": field \"label2id\" must be an object {label: id}, got ",
             describe(label2id));
  std::set<std::string> names(labels.begin(), labels.end());
  for (const auto& [name, value] : label2id.items()) {
    VP_REQUIRE(value.is_number_integer(), source, ": label2id[\"", name, "\"] must be an integer id, got ",
               describe(value));
    int64_t id = value.get<int64_t>();
    VP_REQUIRE(id >= 0 && id < static_cast<int64_t>(labels.size()) && labels[static_cast<size_t>(id)] == name, source,
               ": label2id[\"", name, "\"] = ", id, " disagrees with id2label",
               id >= 0 && id < static_cast<int64_t>(labels.size())
                   ? concat(" (id2label[\"", id, "\"] = \"", labels[static_cast<size_t>(id)], "\")")
                   : concat(" (which has ids 0..", labels.size() - 1, ")"));
  }
  for (const auto& name : names) {
    VP_REQUIRE(label2id.contains(name), source, ": label2id has no entry for label \"", name, "\" of id2label");
  }
}

}  // namespace

HfConfig parse_hf_config(const Json& json, const std::string& source) {
  VP_REQUIRE(json.is_object(), source, ": expected a JSON object, got ", json.type_name());
  Fields fields(json, source);
  HfConfig result;
  ViTConfig& c = result.config;

  c.model_type = fields.string("model_type", "");
  if (c.model_type.empty()) {
    warn(source, ": no \"model_type\"; assuming \"vit\"");
    c.model_type = "vit";
  }
  if (!is_supported_model_type(c.model_type)) {
    std::string supported;
    for (const auto& t : supported_model_types()) supported += concat(supported.empty() ? "" : ", ", "\"", t, "\"");
    fail(source, ": model_type \"", c.model_type, "\" is not supported; vitpipe loads ", supported,
         " (ViT, DeiT, DINOv2, DINOv2 with registers)");
  }

  if (json.contains("architectures") && !json["architectures"].is_null()) {
    const Json& architectures = json["architectures"];
    VP_REQUIRE(architectures.is_array(), source, ": field \"architectures\" must be a list of strings, got ",
               describe(architectures));
    for (const Json& name : architectures) {
      VP_REQUIRE(name.is_string(), source, ": field \"architectures\" must be a list of strings, found ",
                 describe(name));
      result.architectures.push_back(name.get<std::string>());
    }
  }
  for (const auto& name : result.architectures) {
    if (known_architectures().count(name) == 0) {
      warn(source, ": unknown architecture \"", name, "\"; loading the ", c.model_type, " parameters it holds");
    }
  }

  // The family's options and its config class's defaults (transformers' current ones: Dinov2Config has
  // layer_norm_eps 1e-6 and patch_size 14, Dinov2WithRegistersConfig 1e-6 and 16).
  if (c.model_type == "deit") {
    c.distillation_token = true;  // DeiTEmbeddings always holds one
    const bool teacher = std::find(result.architectures.begin(), result.architectures.end(),
                                   "DeiTForImageClassificationWithTeacher") != result.architectures.end();
    c.head = teacher ? HeadKind::cls_and_distillation : HeadKind::cls_token;
  } else if (c.dinov2_family()) {
    const bool registers = c.model_type == "dinov2_with_registers";
    c.layer_norm_eps = 1e-6;
    c.patch_size = registers ? 16 : 14;
    c.layer_scale = true;
    c.head = HeadKind::cls_and_patch_mean;
    c.position_interpolation = registers ? PositionInterpolation::bicubic_antialias : PositionInterpolation::bicubic;
    c.mlp_ratio = fields.number("mlp_ratio", 4.0);
    VP_REQUIRE(c.mlp_ratio > 0, source, ": field \"mlp_ratio\" must be positive, got ", c.mlp_ratio);
    c.layerscale_value = fields.number("layerscale_value", 1.0);
    c.swiglu = fields.boolean("use_swiglu_ffn", false);
    c.mask_token = registers || fields.boolean("use_mask_token", true);
    if (registers) c.num_register_tokens = fields.integer("num_register_tokens", 4);
    fields.number("drop_path_rate", 0.0);  // read only to refuse wrong types; vitpipe trains without drop path
  }

  c.hidden_size = fields.integer("hidden_size", c.hidden_size);
  c.num_hidden_layers = fields.integer("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = fields.integer("num_attention_heads", c.num_attention_heads);
  if (c.dinov2_family()) {
    VP_REQUIRE(c.hidden_size > 0, source, ": field \"hidden_size\" must be a positive integer, got ", c.hidden_size);
    c.intermediate_size = dinov2_intermediate_size(c.hidden_size, c.mlp_ratio, c.swiglu);
  } else {
    c.intermediate_size = fields.integer("intermediate_size", c.intermediate_size);
  }
  c.hidden_act = fields.string("hidden_act", c.hidden_act);
  c.layer_norm_eps = fields.number("layer_norm_eps", c.layer_norm_eps);
  c.image_size = fields.integer("image_size", c.image_size);
  c.patch_size = fields.integer("patch_size", c.patch_size);
  c.num_channels = fields.integer("num_channels", c.num_channels);
  c.qkv_bias = fields.boolean("qkv_bias", c.qkv_bias);
  c.initializer_range = fields.number("initializer_range", c.initializer_range);
  // Read only to refuse wrong types; vitpipe trains without dropout and always writes 0.0.
  fields.number("hidden_dropout_prob", 0.0);
  fields.number("attention_probs_dropout_prob", 0.0);
  if (json.contains("encoder_stride")) fields.integer("encoder_stride", 0);

  const bool has_num_labels = json.contains("num_labels") && !json["num_labels"].is_null();
  const int64_t num_labels = has_num_labels ? fields.integer("num_labels", 0) : 2;
  if (json.contains("id2label") && !json["id2label"].is_null()) {
    c.labels = parse_id2label(json["id2label"], source);
    result.has_id2label = true;
    VP_REQUIRE(!has_num_labels || num_labels == c.num_labels(), source, ": \"num_labels\" is ", num_labels,
               " but id2label has ", c.num_labels(), " labels");
  } else {
    VP_REQUIRE(num_labels > 0 && num_labels <= 1'000'000, source, ": \"num_labels\" must be positive, got ",
               num_labels);
    for (int64_t i = 0; i < num_labels; ++i) c.labels.push_back(concat("LABEL_", i));
  }
  if (json.contains("label2id") && !json["label2id"].is_null()) {
    VP_REQUIRE(result.has_id2label, source, ": \"label2id\" is given without \"id2label\"");
    check_label2id(json["label2id"], c.labels, source);
  }

  const std::string problem = fields.string("problem_type", "");
  if (problem == "multi_label_classification") {
    c.problem_type = ProblemType::multi_label;
    result.has_problem_type = true;
  } else if (problem == "single_label_classification") {
    c.problem_type = ProblemType::single_label;
    result.has_problem_type = true;
  } else {
    VP_REQUIRE(problem.empty(), source, ": problem_type \"", problem,
               "\" is not supported (expected \"multi_label_classification\" or \"single_label_classification\")");
  }

  // transformers >= 4.56 writes "dtype"; older versions "torch_dtype".
  result.torch_dtype = fields.string("dtype", fields.string("torch_dtype", ""));

  for (const auto& [key, value] : json.items()) {
    if (known_keys().count(key) == 0) result.extra[key] = value;
  }
  c.validate(source);
  return result;
}

HfConfig parse_hf_config_text(const std::string& text, const std::string& source) {
  Json json;
  try {
    json = Json::parse(text);
  } catch (const Json::exception& e) {
    fail(source, ": not valid JSON", json_error_detail(e, text));
  }
  return parse_hf_config(json, source);
}

HfConfig read_hf_config(const std::filesystem::path& path) {
  return parse_hf_config_text(read_text_file(path), path.string());
}

Json hf_config_to_json(const ViTConfig& config, const Json& extra) {
  config.validate("config");
  VP_REQUIRE(config.num_labels() > 0, "config: a ViTForImageClassification needs at least one label");
  Json json = Json::object();
  if (extra.is_object()) {
    for (const auto& [key, value] : extra.items()) {
      if (known_keys().count(key) == 0) json[key] = value;
    }
  }
  json["architectures"] = Json::array({classification_architecture(config)});
  json["attention_probs_dropout_prob"] = 0.0;
  json["hidden_act"] = config.hidden_act;
  json["hidden_dropout_prob"] = 0.0;
  json["hidden_size"] = config.hidden_size;
  Json id2label = Json::object();
  Json label2id = Json::object();
  for (size_t i = 0; i < config.labels.size(); ++i) {
    id2label[std::to_string(i)] = config.labels[i];
    label2id[config.labels[i]] = static_cast<int64_t>(i);  // a duplicate name keeps the last id, as in Python
  }
  json["id2label"] = std::move(id2label);
  json["label2id"] = std::move(label2id);
  json["image_size"] = config.image_size;
  json["initializer_range"] = config.initializer_range;
  json["layer_norm_eps"] = config.layer_norm_eps;
  json["model_type"] = config.model_type;
  json["num_attention_heads"] = config.num_attention_heads;
  json["num_channels"] = config.num_channels;
  json["num_hidden_layers"] = config.num_hidden_layers;
  json["patch_size"] = config.patch_size;
  json["problem_type"] = problem_type_name(config.problem_type);
  json["qkv_bias"] = config.qkv_bias;
  json["torch_dtype"] = "float32";
  json["transformers_version"] = kTransformersVersionWritten;
  if (config.dinov2_family()) {
    // Dinov2Config: mlp_ratio instead of intermediate_size (an integral ratio written as an integer, as released).
    if (config.mlp_ratio == std::floor(config.mlp_ratio)) {
      json["mlp_ratio"] = static_cast<int64_t>(config.mlp_ratio);
    } else {
      json["mlp_ratio"] = config.mlp_ratio;
    }
    json["layerscale_value"] = config.layerscale_value;
    json["use_swiglu_ffn"] = config.swiglu;
    json["drop_path_rate"] = 0.0;
    if (config.model_type == "dinov2") json["use_mask_token"] = config.mask_token;
    if (config.model_type == "dinov2_with_registers") json["num_register_tokens"] = config.num_register_tokens;
  } else {
    json["encoder_stride"] = config.patch_size;
    json["intermediate_size"] = config.intermediate_size;
  }
  return json;
}

std::string hf_config_text(const ViTConfig& config, const Json& extra) {
  // transformers: json.dumps(config, indent=2, sort_keys=True) + "\n" (ASCII-escaped, like Python's default).
  return hf_config_to_json(config, extra).dump(2, ' ', true) + "\n";
}

void write_hf_config(const std::filesystem::path& path, const ViTConfig& config, const Json& extra) {
  write_text_file_atomically(path, hf_config_text(config, extra));
}

}  // namespace vitpipe
