#include "model/model_family.h"

#include <algorithm>

#include "util/error.h"

namespace vitpipe {

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> types = {"vit", "deit", "dinov2", "dinov2_with_registers"};
  return types;
}

bool is_supported_model_type(const std::string& model_type) {
  const auto& types = supported_model_types();
  return std::find(types.begin(), types.end(), model_type) != types.end();
}

std::string model_prefix(const ViTConfig& config) {
  if (config.model_type == "vit") return "vit.";
  if (config.model_type == "deit") return "deit.";
  if (config.model_type == "dinov2") return "dinov2.";
  if (config.model_type == "dinov2_with_registers") return "dinov2_with_registers.";
  fail("model_type \"", config.model_type, "\" has no parameter names");
}

const std::vector<LinearSite>& all_linear_sites() {
  static const std::vector<LinearSite> sites = {LinearSite::query,      LinearSite::key, LinearSite::value,
                                                LinearSite::projection, LinearSite::fc1, LinearSite::fc2};
  return sites;
}

const char* linear_site_name(LinearSite site) {
  switch (site) {
    case LinearSite::query:
      return "query";
    case LinearSite::key:
      return "key";
    case LinearSite::value:
      return "value";
    case LinearSite::projection:
      return "projection";
    case LinearSite::fc1:
      return "fc1";
    case LinearSite::fc2:
      return "fc2";
  }
  return "?";
}

LinearSite parse_linear_site(const std::string& name) {
  for (LinearSite site : all_linear_sites()) {
    if (name == linear_site_name(site)) return site;
  }
  fail("--lora-targets: unknown layer \"", name,
       "\"; expected query, key, value, projection (the attention output), fc1 or fc2 (the MLP's two layers)");
}

std::string block_prefix(const ViTConfig& config, int64_t layer) {
  return concat(model_prefix(config), "encoder.layer.", layer, ".");
}

std::string norm1_module(const ViTConfig& config, int64_t layer) {
  return block_prefix(config, layer) + (config.dinov2_family() ? "norm1" : "layernorm_before");
}

std::string norm2_module(const ViTConfig& config, int64_t layer) {
  return block_prefix(config, layer) + (config.dinov2_family() ? "norm2" : "layernorm_after");
}

std::string linear_module(const ViTConfig& config, int64_t layer, LinearSite site) {
  const std::string block = block_prefix(config, layer);
  const bool dino = config.dinov2_family();
  switch (site) {
    case LinearSite::query:
      return block + "attention.attention.query";
    case LinearSite::key:
      return block + "attention.attention.key";
    case LinearSite::value:
      return block + "attention.attention.value";
    case LinearSite::projection:
      return block + "attention.output.dense";
    case LinearSite::fc1:
      return block + (!dino ? "intermediate.dense" : config.swiglu ? "mlp.weights_in" : "mlp.fc1");
    case LinearSite::fc2:
      return block + (!dino ? "output.dense" : config.swiglu ? "mlp.weights_out" : "mlp.fc2");
  }
  return block;
}

std::string layer_scale_module(const ViTConfig& config, int64_t layer, int which) {
  return concat(block_prefix(config, layer), "layer_scale", which);
}

int64_t linear_out_features(const ViTConfig& config, LinearSite site) {
  switch (site) {
    case LinearSite::fc1:
      return config.fc1_out();
    default:
      return config.hidden_size;
  }
}

int64_t linear_in_features(const ViTConfig& config, LinearSite site) {
  return site == LinearSite::fc2 ? config.intermediate_size : config.hidden_size;
}

std::string classification_architecture(const ViTConfig& config) {
  if (config.model_type == "vit") return "ViTForImageClassification";
  if (config.model_type == "deit") {
    return config.head == HeadKind::cls_and_distillation ? "DeiTForImageClassificationWithTeacher"
                                                         : "DeiTForImageClassification";
  }
  if (config.model_type == "dinov2") return "Dinov2ForImageClassification";
  if (config.model_type == "dinov2_with_registers") return "Dinov2WithRegistersForImageClassification";
  fail("model_type \"", config.model_type, "\" has no classification architecture");
}

}  // namespace vitpipe
