// The model's hyper-parameters, with the field names and defaults of transformers' ViTConfig.
// Reading/writing config.json lives in io/hf_config.*; this is plain data plus derived sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vitpipe {

enum class ProblemType { multi_label, single_label };

struct ViTConfig {
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  std::string hidden_act = "gelu";  // exact erf GELU; the only activation supported
  double layer_norm_eps = 1e-12;
  int64_t image_size = 224;
  int64_t patch_size = 16;
  int64_t num_channels = 3;
  bool qkv_bias = true;
  double initializer_range = 0.02;
  std::string model_type = "vit";   // "vit" or "deit" (non-distilled DeiT loads as ViT)
  std::vector<std::string> labels;  // id2label in id order; empty for a backbone
  ProblemType problem_type = ProblemType::multi_label;

  int64_t num_labels() const { return static_cast<int64_t>(labels.size()); }
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t grid() const { return image_size / patch_size; }  // patches per side
  int64_t num_patches() const { return grid() * grid(); }
  int64_t tokens() const { return num_patches() + 1; }  // CLS + patches
  int64_t patch_dim() const { return num_channels * patch_size * patch_size; }

  // Parameters of the whole model, in floating point so that absurd sizes cannot overflow.
  double approximate_parameter_count() const;

  // Throws vitpipe::Error naming the offending field (`source` is e.g. the config.json path), also for sizes
  // beyond fixed upper bounds and for more parameters than max_model_parameters() (util/size_limits.h).
  void validate(const std::string& source) const;
};

const char* problem_type_name(ProblemType type);  // transformers' spelling

}  // namespace vitpipe
