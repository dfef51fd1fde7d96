// config.json of a Hugging Face ViT, DeiT, DINOv2 or DINOv2-with-registers checkpoint <-> ViTConfig.
// Reading applies the config class's defaults (ViTConfig, DeiTConfig, Dinov2Config, Dinov2WithRegistersConfig) to
// absent fields, sets the family options (model/vit_config.h) from model_type and architectures, refuses wrong
// types naming the field, checks id2label/label2id/num_labels agree, and calls ViTConfig::validate. Writing
// produces what transformers' save_pretrained writes for the family's ...ForImageClassification, so
// AutoModelForImageClassification loads it as is.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/vit_config.h"

namespace vitpipe {

struct HfConfig {
  ViTConfig config;  // labels: id2label in id order, or LABEL_0..LABEL_{n-1} from num_labels (default 2)
  std::vector<std::string> architectures;
  bool has_id2label = false;      // false: the labels are transformers' LABEL_i placeholders
  bool has_problem_type = false;  // false: config.problem_type is ViTConfig's default (multi-label)
  std::string torch_dtype;        // `torch_dtype` or `dtype`; "" when absent
  // Keys vitpipe does not interpret (e.g. "_name_or_path", "pooler_act"), written back by write_hf_config.
  nlohmann::json extra = nlohmann::json::object();
};

// `source` names the file in messages. Throws vitpipe::Error naming the field on a wrong type or value, and for a
// model_type vitpipe does not run (naming the supported ones).
HfConfig parse_hf_config(const nlohmann::json& json, const std::string& source);
HfConfig parse_hf_config_text(const std::string& text, const std::string& source);
HfConfig read_hf_config(const std::filesystem::path& path);

// The JSON transformers would save for the family's ...ForImageClassification with this config: the
// hyper-parameters (DINOv2: mlp_ratio, layerscale_value, use_swiglu_ffn, use_mask_token or num_register_tokens),
// id2label (string keys) / label2id, problem_type, architectures, model_type, torch_dtype "float32", dropouts 0.0,
// encoder_stride = patch_size (ViT, DeiT), transformers_version. `extra` keys are kept unless vitpipe sets them.
// Throws when the config has no labels (a classifier needs at least one).
nlohmann::json hf_config_to_json(const ViTConfig& config, const nlohmann::json& extra = nlohmann::json::object());
std::string hf_config_text(const ViTConfig& config, const nlohmann::json& extra = nlohmann::json::object());
void write_hf_config(const std::filesystem::path& path, const ViTConfig& config,
                     const nlohmann::json& extra = nlohmann::json::object());

// The transformers version whose conventions the written files follow (position interpolation by output size).
inline constexpr const char* kTransformersVersionWritten = "4.45.0";

}  // namespace vitpipe
