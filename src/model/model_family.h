// The per-family table (DESIGN.md "Model families"): which Hugging Face module names a family gives the parts of the
// one encoder vitpipe runs. A family is this table plus the options in ViTConfig, not a second engine.
//
//   part                 ViT / DeiT (model_type vit, deit)     DINOv2 (dinov2, dinov2_with_registers)
//   model prefix         vit. / deit.                          dinov2. / dinov2_with_registers.
//   LayerNorm 1, 2       layernorm_before, layernorm_after     norm1, norm2
//   MLP in, out          intermediate.dense, output.dense      mlp.fc1, mlp.fc2 (SwiGLU: mlp.weights_in, weights_out)
//   LayerScale           -                                     layer_scale1.lambda1, layer_scale2.lambda1
//   attention            attention.attention.{query,key,value}, attention.output.dense (all families)
//   head                 classifier (DeiT with teacher: cls_classifier + distillation_classifier)
#pragma once

#include <string>
#include <vector>

#include "model/vit_config.h"

namespace vitpipe {

// The model types vitpipe loads, for messages.
const std::vector<std::string>& supported_model_types();
bool is_supported_model_type(const std::string& model_type);

// "vit.", "deit.", "dinov2." or "dinov2_with_registers.": the base model inside ...ForImageClassification.
std::string model_prefix(const ViTConfig& config);

// The linear layers of a block, the places LoRA can go.
enum class LinearSite { query, key, value, projection, fc1, fc2 };
const std::vector<LinearSite>& all_linear_sites();
const char* linear_site_name(LinearSite site);  // "query", "key", "value", "projection", "fc1", "fc2"
// Parses a --lora-targets entry; throws listing the names.
LinearSite parse_linear_site(const std::string& name);

// Module paths inside block `layer`, with the model prefix: "vit.encoder.layer.3.layernorm_before".
std::string block_prefix(const ViTConfig& config, int64_t layer);
std::string norm1_module(const ViTConfig& config, int64_t layer);
std::string norm2_module(const ViTConfig& config, int64_t layer);
std::string linear_module(const ViTConfig& config, int64_t layer, LinearSite site);
std::string layer_scale_module(const ViTConfig& config, int64_t layer, int which);  // which = 1 or 2

// [out, in] of a block's linear layer.
int64_t linear_out_features(const ViTConfig& config, LinearSite site);
int64_t linear_in_features(const ViTConfig& config, LinearSite site);

// What transformers' save_pretrained writes as "architectures" for this model with a classifier.
std::string classification_architecture(const ViTConfig& config);

}  // namespace vitpipe
