#include "io/peft_adapter.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <vector>

#include "io/hf_config.h"
#include "io/model_reference.h"
#include "io/pytorch_bin.h"
#include "io/recorded_model_path.h"
#include "io/safetensors.h"
#include "model/low_rank_update.h"
#include "model/model_family.h"
#include "util/error.h"
#include "util/json_error_detail.h"
#include "util/log.h"

namespace fs = std::filesystem;

namespace vitpipe {
namespace {

using Json = nlohmann::ordered_json;  // rank_pattern / alpha_pattern are looked up in the file's order, as in Python

constexpr const char* kPrefix = "base_model.model.";

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// What a key left at its default looks like: null, false, "" or an empty list / object.
bool default_like(const Json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_string() && v.get<std::string>().empty()) ||
         ((v.is_array() || v.is_object()) && v.empty());
}

struct AdapterConfig {
  std::string path;  // adapter_config.json, for messages
  int64_t r = 8;
  double lora_alpha = 8;
  bool use_rslora = false;
  Json target_modules;  // a list of names or a regular expression (string)
  Json rank_pattern = Json::object(), alpha_pattern = Json::object();
  Json layers_to_transform;  // null, an int or a list of ints
  Json layers_pattern;       // null, a string or a list of strings
  std::string base_model, revision;
  std::string bias = "none";
};

// Keys read below, or that change nothing vitpipe computes (training-time options, metadata).
const std::set<std::string> kAccepted = {"peft_type",
                                         "task_type",
                                         "inference_mode",
                                         "init_lora_weights",
                                         "lora_dropout",
                                         "auto_mapping",
                                         "loftq_config",
                                         "megatron_config",
                                         "megatron_core",
                                         "fan_in_fan_out",
                                         "bias",
                                         "modules_to_save",
                                         "revision",
                                         "runtime_config",
                                         "eva_config",
                                         "corda_config",
                                         "peft_version",
                                         "base_model_name_or_path",
                                         "r",
                                         "lora_alpha",
                                         "use_rslora",
                                         "target_modules",
                                         "rank_pattern",
                                         "alpha_pattern",
                                         "layers_to_transform",
                                         "layers_pattern",
                                         "qalora_group_size",
                                         "lora_ga_config"};
// Keys whose non-default values vitpipe cannot compute.
const std::set<std::string> kUnsupported = {"use_dora",
                                            "lora_bias",
                                            "layer_replication",
                                            "exclude_modules",
                                            "target_parameters",
                                            "trainable_token_indices",
                                            "alora_invocation_tokens",
                                            "use_qalora",
                                            "arrow_config",
                                            "velora_config",
                                            "monteclora_config",
                                            "use_bdlora"};

// peft compiles these with Python's re; a pattern std::regex (ECMAScript) cannot compile is refused here, by key.
void require_regex(const std::string& path, const std::string& key, const std::string& pattern) {
  try {
    std::regex compiled(pattern);
  } catch (const std::regex_error& e) {
    fail(path, ": ", key, ": \"", pattern, "\" is not a regular expression vitpipe can use (", e.what(), ")");
  }
}

AdapterConfig read_adapter_config(const fs::path& directory) {
  AdapterConfig c;
  const fs::path path = directory / "adapter_config.json";
  c.path = path.string();
  std::ifstream in(path, std::ios::binary);
  VP_REQUIRE(in, "cannot read ", c.path);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    fail(c.path, ": not JSON", json_error_detail(e, text));
  }
  VP_REQUIRE(j.is_object(), c.path, ": expected a JSON object");
  try {  // a field of the wrong JSON type (use_rslora: "yes") names the file, not just the JSON library
    const std::string type = j.value("peft_type", std::string("LORA"));
    VP_REQUIRE(type == "LORA", c.path, ": peft_type \"", type, "\" is not supported (vitpipe applies LORA adapters)");
    for (const auto& [key, value] : j.items()) {
      if (kAccepted.count(key)) continue;
      if (kUnsupported.count(key)) {
        VP_REQUIRE(default_like(value), c.path, ": ", key, " = ", value.dump(),
                   " is not supported (vitpipe merges plain LoRA: W += scaling * B A)");
        continue;
      }
      VP_REQUIRE(
          default_like(value), c.path, ": unknown key \"", key, "\" = ", value.dump(),
          " (vitpipe knows peft's LoraConfig keys up to 0.20; one it does not know is accepted only when null, false "
          "or empty)");
    }
    auto number = [&](const char* key, double fallback) {
      if (!j.contains(key) || j[key].is_null()) return fallback;
      VP_REQUIRE(j[key].is_number(), c.path, ": ", key, " must be a number, got ", j[key].dump());
      return j[key].get<double>();
    };
    const double r = number("r", 8);
    VP_REQUIRE(r >= 1 && r == std::floor(r) && r <= 1e6, c.path, ": r must be a positive integer, got ", r);
    c.r = static_cast<int64_t>(r);
    c.lora_alpha = number("lora_alpha", 8);
    c.use_rslora = j.value("use_rslora", false);
    c.target_modules = j.value("target_modules", Json());
    VP_REQUIRE(c.target_modules.is_string() || (c.target_modules.is_array() && !c.target_modules.empty()), c.path,
               ": target_modules must be a list of module names or a regular expression, got ",
               c.target_modules.dump());
    if (c.target_modules.is_array()) {
      for (const auto& t : c.target_modules) {
        VP_REQUIRE(t.is_string(), c.path, ": target_modules entries must be strings, got ", t.dump());
      }
    }
    for (const char* key : {"rank_pattern", "alpha_pattern"}) {
      Json v = j.value(key, Json::object());
      if (v.is_null()) v = Json::object();
      VP_REQUIRE(v.is_object(), c.path, ": ", key, " must be an object, got ", v.dump());
      const bool rank = std::string(key) == "rank_pattern";
      for (const auto& [k, x] : v.items()) {
        VP_REQUIRE(rank ? x.is_number_integer() && x.get<int64_t>() >= 1 : x.is_number(), c.path, ": ", key, "[\"", k,
                   "\"] must be ", rank ? "a positive integer" : "a number", ", got ", x.dump());
        require_regex(c.path, key, "^(.*\\.)?(" + k + ")$");
      }
      (std::string(key) == "rank_pattern" ? c.rank_pattern : c.alpha_pattern) = v;
    }
    if (c.target_modules.is_string()) require_regex(c.path, "target_modules", c.target_modules.get<std::string>());
    c.layers_to_transform = j.value("layers_to_transform", Json());
    VP_REQUIRE(
        c.layers_to_transform.is_null() || c.layers_to_transform.is_number_integer() ||
            (c.layers_to_transform.is_array() && std::all_of(c.layers_to_transform.begin(), c.layers_to_transform.end(),
                                                             [](const Json& l) { return l.is_number_integer(); })),
        c.path, ": layers_to_transform must be a layer index or a list of them, got ", c.layers_to_transform.dump());
    c.layers_pattern = j.value("layers_pattern", Json());
    VP_REQUIRE(c.layers_pattern.is_null() || c.layers_pattern.is_string() ||
                   (c.layers_pattern.is_array() && std::all_of(c.layers_pattern.begin(), c.layers_pattern.end(),
                                                               [](const Json& p) { return p.is_string(); })),
               c.path, ": layers_pattern must be a name or a list of names, got ", c.layers_pattern.dump());
    if (c.layers_pattern.is_string()) require_regex(c.path, "layers_pattern", c.layers_pattern.get<std::string>());
    for (const auto& p : c.layers_pattern.is_array() ? c.layers_pattern : Json::array()) {
      require_regex(c.path, "layers_pattern", p.get<std::string>());
    }
    const Json base = j.value("base_model_name_or_path", Json());
    VP_REQUIRE(base.is_string() && !base.get<std::string>().empty(), c.path,
               ": base_model_name_or_path must name the base model (a directory or a Hub repo id)");
    c.base_model = base.get<std::string>();
    // vitpipe records a local base by its absolute path: one that has moved is not a Hub id to download.
    require_recorded_base(c.base_model, c.path, "put it back, or write its new path into base_model_name_or_path");
    const Json bias = j.value("bias", Json("none"));
    VP_REQUIRE(bias.is_string(), c.path, ": bias must be \"none\", \"all\" or \"lora_only\", got ", bias.dump());
    c.bias = bias.get<std::string>();
    const Json revision = j.value("revision", Json());
    c.revision = revision.is_string() ? revision.get<std::string>() : "main";
  } catch (const Json::exception& e) {
    fail(c.path, ": a field has the wrong type (", e.what(), ")");
  }
  return c;
}

// peft's check_target_module_exists (tuners_utils.py): a regular expression must match the whole key; a list entry
// matches the key itself or its last dotted components; layers_to_transform then keeps the layers it lists, the
// layer index read after `layers_pattern` (or after any component) as ".<index>.".
bool targeted(const AdapterConfig& c, const std::string& key) {
  if (c.target_modules.is_string()) return std::regex_match(key, std::regex(c.target_modules.get<std::string>()));
  bool found = false;
  for (const auto& t : c.target_modules) {
    const std::string name = t.get<std::string>();
    found |= key == name || ends_with(key, "." + name);
  }
  const Json& layers = c.layers_to_transform;
  const bool by_layer = !layers.is_null() && !(layers.is_array() && layers.empty());
  if (!found || !by_layer) return found;
  std::vector<std::string> patterns;
  if (c.layers_pattern.is_string() && !c.layers_pattern.get<std::string>().empty()) {
    patterns.push_back(c.layers_pattern.get<std::string>());
  } else if (c.layers_pattern.is_array()) {
    for (const auto& p : c.layers_pattern) patterns.push_back(p.get<std::string>());
  }
  std::smatch m;
  bool have_index = false;
  if (patterns.empty()) {
    have_index = std::regex_search(key, m, std::regex(R"(^.*\.[^.]*\.(\d+)\.)"));
  } else {
    for (const auto& p : patterns) {
      if ((have_index = std::regex_search(key, m, std::regex("^.*\\." + p + "\\.(\\d+)\\.")))) break;
    }
  }
  if (!have_index) return false;
  const int64_t index = std::stoll(m[1].str());
  if (layers.is_number_integer()) return index == layers.get<int64_t>();
  for (const auto& l : layers) {
    if (l.is_number_integer() && l.get<int64_t>() == index) return true;
  }
  return false;
}

// The pattern key for a module (peft >= 0.14 get_pattern_key, 0.15's expression): the first key k, in the file's
// order, for which "(.*\.)?(k)$" matches the module's key from its start.
const Json* pattern_value(const Json& patterns, const std::string& key) {
  for (const auto& [k, v] : patterns.items()) {
    if (std::regex_search(key, std::regex("^(.*\\.)?(" + k + ")$"))) return &v;
  }
  return nullptr;
}

TensorMap read_adapter_weights(const fs::path& directory, std::string& file) {
  if (fs::exists(directory / "adapter_model.safetensors")) {
    file = (directory / "adapter_model.safetensors").string();
    return read_safetensors(directory / "adapter_model.safetensors").tensors;
  }
  VP_REQUIRE(fs::exists(directory / "adapter_model.bin"), directory.string(),
             ": an adapter holds adapter_model.safetensors or adapter_model.bin");
  file = (directory / "adapter_model.bin").string();
  return read_pytorch_bin(directory / "adapter_model.bin");  // a restricted unpickler: nothing in it is executed
}

// The labels a config.json beside the adapter gives (its id2label in id order), or none.
std::vector<std::string> labels_beside(const fs::path& directory) {
  const fs::path path = directory / "config.json";
  if (!fs::exists(path)) return {};
  std::ifstream in(path, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    fail(path.string(), ": not JSON", json_error_detail(e, text));
  }
  if (!j.contains("id2label") || !j["id2label"].is_object()) return {};
  std::vector<std::string> labels(j["id2label"].size());
  for (const auto& [k, v] : j["id2label"].items()) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(k, &used);
    } catch (const std::exception&) {
    }
    VP_REQUIRE(used == k.size() && id >= 0 && id < static_cast<long long>(labels.size()) && v.is_string(),
               path.string(), ": id2label must map ids 0..n-1 to names");
    labels[static_cast<size_t>(id)] = v.get<std::string>();
  }
  return labels;
}

}  // namespace

bool is_peft_adapter_directory(const fs::path& directory) {
  return fs::is_directory(directory) && fs::exists(directory / "adapter_config.json");
}

PeftTrainingStart read_peft_adapter_for_training(const fs::path& directory) {
  const AdapterConfig c = read_adapter_config(directory);
  const std::string why =
      " (train continues adapters vitpipe's LoRA can hold: one rank and alpha, the same layers in "
      "every block, no bias training)";
  VP_REQUIRE(c.rank_pattern.empty() && c.alpha_pattern.empty(), c.path, ": rank_pattern / alpha_pattern are set", why);
  VP_REQUIRE(c.layers_to_transform.is_null() || (c.layers_to_transform.is_array() && c.layers_to_transform.empty()),
             c.path, ": layers_to_transform is set", why);
  VP_REQUIRE(c.bias == "none", c.path, ": bias is \"", c.bias, "\"", why);
  PeftTrainingStart start;
  start.base_model = c.base_model;
  start.revision = c.revision;
  start.rank = c.r;
  start.alpha = c.use_rslora ? c.lora_alpha * std::sqrt(static_cast<double>(c.r)) : c.lora_alpha;
  ModelReferenceOptions reference;
  reference.revision = c.revision;
  ViTConfig base = read_hf_config(resolve_model_reference(c.base_model, reference) / "config.json").config;
  std::string file;
  const TensorMap raw = read_adapter_weights(directory, file);
  bool backbone_names = false;
  for (const auto& [name, tensor] : raw) {
    const std::string rest = starts_with(name, kPrefix) ? name.substr(std::string(kPrefix).size()) : name;
    backbone_names |= starts_with(rest, "encoder.") || starts_with(rest, "embeddings.");
  }
  const std::string prefix = model_prefix(base);
  auto peft_key = [&](const std::string& module) {
    return backbone_names && starts_with(module, prefix) ? module.substr(prefix.size()) : module;
  };
  VP_REQUIRE(!targeted(c, "classifier"), c.path, ": target_modules select the classifier", why);
  for (LinearSite site : all_linear_sites()) {
    int64_t selected = 0;
    for (int64_t l = 0; l < base.num_hidden_layers; ++l)
      selected += targeted(c, peft_key(linear_module(base, l, site)));
    VP_REQUIRE(selected == 0 || selected == base.num_hidden_layers, c.path, ": target_modules select ",
               linear_site_name(site), " in ", selected, " of ", base.num_hidden_layers, " blocks", why);
    if (selected > 0) start.sites.push_back(linear_site_name(site));
  }
  VP_REQUIRE(!start.sites.empty(), c.path, ": target_modules select no Linear layer of ", c.base_model);
  for (const auto& [name, tensor] : raw) {
    VP_REQUIRE(starts_with(name, kPrefix), file, ": tensor '", name, "' does not start with '", kPrefix, "'");
    std::string rest = name.substr(std::string(kPrefix).size());
    VP_REQUIRE(
        rest.find(".lora_magnitude_vector") == std::string::npos && rest.find(".lora_B.bias") == std::string::npos,
        file, ": tensor '", name, "' belongs to a LoRA variant vitpipe does not train (DoRA, LoRA biases)");
    const size_t saved = rest.find(".modules_to_save.");
    if (saved != std::string::npos) rest.erase(saved, std::string(".modules_to_save").size());
    start.tensors[backbone_names ? canonical_parameter_name(rest, base) : rest] = tensor.to(DType::f32);
  }
  return start;
}

PeftBaseReference peft_base_reference(const fs::path& directory) {
  const AdapterConfig c = read_adapter_config(directory);
  return {c.base_model, c.revision};
}

LoadedModel load_peft_adapter_model(const fs::path& directory, const LoadOptions& options) {
  const AdapterConfig c = read_adapter_config(directory);
  std::string file;
  const TensorMap raw = read_adapter_weights(directory, file);

  // Adapter tensor names without peft's wrapper prefix: LoRA matrices by module, everything else by parameter.
  std::map<std::string, Tensor> lora_a, lora_b, replaced;
  bool backbone_names = false;
  for (const auto& [name, tensor] : raw) {
    VP_REQUIRE(starts_with(name, kPrefix), file, ": tensor '", name, "' does not start with '", kPrefix,
               "' (not a peft adapter's state dict)");
    std::string rest = name.substr(std::string(kPrefix).size());
    backbone_names |= starts_with(rest, "encoder.") || starts_with(rest, "embeddings.");
    for (const char* part : {".lora_magnitude_vector", ".lora_embedding_", ".lora_B.bias"}) {
      VP_REQUIRE(rest.find(part) == std::string::npos, file, ": tensor '", name,
                 "' belongs to a LoRA variant vitpipe does not compute (DoRA, embedding LoRA or LoRA biases)");
    }
    if (ends_with(rest, ".lora_A.weight")) {
      lora_a[rest.substr(0, rest.size() - 14)] = tensor;
    } else if (ends_with(rest, ".lora_B.weight")) {
      lora_b[rest.substr(0, rest.size() - 14)] = tensor;
    } else {
      const size_t saved = rest.find(".modules_to_save.");
      if (saved != std::string::npos) rest.erase(saved, std::string(".modules_to_save").size());
      replaced[rest] = tensor;
    }
  }

  // The base, with the adapter's labels when it carries the classifier.
  LoadOptions base_options = options;
  base_options.reference.revision = c.revision;
  const ViTConfig probe =
      read_hf_config(resolve_model_reference(c.base_model, base_options.reference) / "config.json").config;
  const std::string prefix = model_prefix(probe);
  auto layout_name = [&](const std::string& adapter_name) {
    return backbone_names ? canonical_parameter_name(adapter_name, probe) : adapter_name;
  };
  int64_t classifier_outputs = -1;
  for (const auto& [name, tensor] : replaced) {
    if (ends_with(layout_name(name), "classifier.weight")) classifier_outputs = tensor.dim(0);
  }
  if (classifier_outputs >= 0) {
    std::vector<std::string> labels = labels_beside(directory);
    const char* source = "config.json beside the adapter";
    if (labels.empty() && probe.num_labels() == classifier_outputs) {
      labels = probe.labels;
      source = "the base model's config.json";
    }
    if (!options.labels.empty()) {
      VP_REQUIRE(labels.empty() || labels == options.labels, directory.string(), ": --labels differ from the ", source,
                 "'s labels");
      labels = options.labels;
      source = "--labels";
    }
    VP_REQUIRE(!labels.empty(), directory.string(), ": the adapter's classifier has ", classifier_outputs,
               " outputs and nothing names them: give --labels (or put a config.json with id2label beside it)");
    VP_REQUIRE(static_cast<int64_t>(labels.size()) == classifier_outputs, directory.string(), ": ", source, " has ",
               labels.size(), " labels but the adapter's classifier has ", classifier_outputs, " outputs");
    base_options.labels = labels;
    base_options.allow_fresh_head = true;  // the adapter's classifier replaces it
  }
  LoadedModel model = load_model(c.base_model, base_options);
  const ParameterLayout& layout = model.parameters.layout();

  // Linear layers of the model, by the key peft sees (the module path in the model peft wrapped).
  std::map<std::string, const ParamSpec*> linear;  // peft key -> weight spec
  std::set<std::string> modules;                   // every module path, for "not found" checks
  for (const ParamSpec& spec : layout.specs()) {
    std::string module = spec.name.substr(0, spec.name.rfind('.'));
    if (backbone_names && starts_with(module, prefix)) module = module.substr(prefix.size());
    for (size_t dot = module.find('.'); dot != std::string::npos; dot = module.find('.', dot + 1)) {
      modules.insert(module.substr(0, dot));
    }
    modules.insert(module);
    if (ends_with(spec.name, ".weight") && spec.shape.size() == 2 && !spec.is_lora()) linear[module] = &spec;
  }
  if (c.target_modules.is_array()) {
    for (const auto& t : c.target_modules) {
      const std::string name = t.get<std::string>();
      bool exists = false;
      for (const auto& m : modules) exists |= m == name || ends_with(m, "." + name);
      VP_REQUIRE(exists, c.path, ": target_modules names \"", name, "\", which ", c.base_model, " does not have");
    }
  }
  std::set<std::string> used;
  int adapted = 0;
  for (const auto& [key, spec] : linear) {
    if (!targeted(c, key)) continue;
    const auto a = lora_a.find(key), b = lora_b.find(key);
    VP_REQUIRE(a != lora_a.end() && b != lora_b.end(), file, ": no lora_A / lora_B for ", key,
               ", which adapter_config.json's target_modules select");
    const int64_t out = spec->shape[0], in = spec->shape[1];
    const Json* rank = pattern_value(c.rank_pattern, key);
    const Json* alpha = pattern_value(c.alpha_pattern, key);
    const int64_t r = rank ? rank->get<int64_t>() : c.r;
    const double lora_alpha = alpha ? alpha->get<double>() : c.lora_alpha;
    VP_REQUIRE(a->second.rank() == 2 && b->second.rank() == 2 && a->second.dim(0) == r && a->second.dim(1) == in &&
                   b->second.dim(0) == out && b->second.dim(1) == r,
               file, ": ", key, ": lora_A ", shape_string(a->second.shape()), " and lora_B ",
               shape_string(b->second.shape()), " do not fit a [", out, ", ", in, "] layer at rank ", r,
               rank ? " (rank_pattern)" : " (r)");
    const double scaling = c.use_rslora ? lora_alpha / std::sqrt(static_cast<double>(r)) : lora_alpha / r;
    add_low_rank_update(model.parameters.tensor(*spec), a->second.to(DType::f32), b->second.to(DType::f32), scaling);
    used.insert(key);
    ++adapted;
  }
  for (const auto* matrices : {&lora_a, &lora_b}) {
    for (const auto& [key, tensor] : *matrices) {
      VP_REQUIRE(used.count(key), file, ": LoRA matrices for ", key,
                 linear.count(key) ? ", which adapter_config.json's target_modules do not select"
                                   : ", which is not a Linear layer of the base model (vitpipe adapts Linear layers)");
    }
  }
  for (const auto& [name, tensor] : replaced) {
    const std::string target = layout_name(name);
    const ParamSpec* spec = layout.find(target);
    VP_REQUIRE(spec != nullptr, file, ": tensor '", kPrefix, name, "' names no parameter of ", c.base_model);
    VP_REQUIRE(tensor.shape() == spec->shape, file, ": tensor '", kPrefix, name, "' is ", shape_string(tensor.shape()),
               ", the model's ", spec->name, " is ", shape_string(spec->shape));
    const Tensor value = tensor.to(DType::f32);
    std::copy(value.f32(), value.f32() + value.numel(), model.parameters.tensor(*spec).f32());
  }
  if (classifier_outputs >= 0) model.fresh_head = false;
  info(directory.string(), ": LoRA adapter merged into ", c.base_model, " (", adapted, " layers, ", replaced.size(),
       " tensors replaced)");
  return model;
}

}  // namespace vitpipe
