// The model's hyper-parameters, with the field names and defaults of transformers' ViTConfig, plus the options that
// make the other families (DeiT with a distillation token, DINOv2, DINOv2 with registers) the same encoder
// (DESIGN.md "Model families": one engine, a few options, a table of names in model/model_family.h).
// Reading/writing config.json lives in io/hf_config.*; this is plain data plus derived sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vitpipe {

enum class ProblemType { multi_label, single_label };

// What the classifier reads (each family's ...ForImageClassification).
enum class HeadKind {
  cls_token,             // classifier(LN(h)[0]): ViT, DeiTForImageClassification
  cls_and_distillation,  // (cls_classifier(LN(h)[0]) + distillation_classifier(LN(h)[1])) / 2: DeiT...WithTeacher
  cls_and_patch_mean,    // classifier([LN(h)[0], mean of LN(h) over the patch tokens]): Dinov2ForImageClassification
};

// How position embeddings reach another patch grid than the checkpoint's.
enum class PositionInterpolation {
  at_load,            // ViT, DeiT: resized once when loading (transformers needs interpolate_pos_encoding=True)
  bicubic,            // DINOv2: in every forward pass, bicubic (A = -0.75), no antialiasing
  bicubic_antialias,  // DINOv2 with registers: in every forward pass, bicubic with antialias=True (A = -0.5)
};

struct ViTConfig {
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;  // DINOv2: int(hidden_size * mlp_ratio) (SwiGLU: its hidden width, see below)
  std::string hidden_act = "gelu";   // exact erf GELU; the only activation supported
  double layer_norm_eps = 1e-12;
  int64_t image_size = 224;  // config.json's: the position embeddings' grid is image_size / patch_size
  int64_t patch_size = 16;
  int64_t num_channels = 3;
  bool qkv_bias = true;
  double initializer_range = 0.02;
  std::string model_type = "vit";   // "vit", "deit", "dinov2", "dinov2_with_registers"
  std::vector<std::string> labels;  // id2label in id order; empty for a backbone
  ProblemType problem_type = ProblemType::multi_label;

  // Family options.
  HeadKind head = HeadKind::cls_token;
  bool distillation_token = false;  // DeiT: [CLS, DIST, patches], every token has a position embedding
  int64_t num_register_tokens = 0;  // DINOv2 with registers: [CLS, REG x R, patches], registers have none
  bool layer_scale = false;         // DINOv2: x + lambda1 * branch after attention and after the MLP
  double layerscale_value = 1.0;    // LayerScale's initial value (fresh initialisation)
  bool swiglu = false;              // DINOv2 use_swiglu_ffn: weights_in [2h, D], silu(x1) * x2, weights_out [D, h]
  double mlp_ratio = 4.0;           // DINOv2's MLP width factor (config.json has it instead of intermediate_size)
  bool mask_token = false;          // embeddings.mask_token [1, D]: masked-image modelling only, never trained here
  PositionInterpolation position_interpolation = PositionInterpolation::at_load;
  int64_t input_image_size = 0;  // DINOv2: the side images are fed at (0 = image_size); positions follow per pass

  int64_t num_labels() const { return static_cast<int64_t>(labels.size()); }
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t input_size() const { return input_image_size > 0 ? input_image_size : image_size; }
  int64_t grid() const { return input_size() / patch_size; }         // patches per side of the input
  int64_t num_patches() const { return grid() * grid(); }            // patch tokens of the input
  int64_t position_grid() const { return image_size / patch_size; }  // the checkpoint's position grid
  int64_t prefix_tokens() const { return 1 + (distillation_token ? 1 : 0) + num_register_tokens; }
  int64_t positioned_prefix() const { return 1 + (distillation_token ? 1 : 0); }  // prefix tokens with positions
  int64_t tokens() const { return prefix_tokens() + num_patches(); }
  int64_t position_rows() const { return positioned_prefix() + position_grid() * position_grid(); }
  bool resamples_positions() const { return grid() != position_grid(); }  // in the forward pass (DINOv2)
  int64_t patch_dim() const { return num_channels * patch_size * patch_size; }
  int64_t fc1_out() const { return swiglu ? 2 * intermediate_size : intermediate_size; }
  int64_t head_features() const { return head == HeadKind::cls_and_patch_mean ? 2 * hidden_size : hidden_size; }
  // Token 0 alone reaches the logits, so the final block may compute it alone (model/classifier_token_block.h).
  bool head_reads_token_zero_only() const { return head == HeadKind::cls_token; }
  bool dinov2_family() const { return model_type == "dinov2" || model_type == "dinov2_with_registers"; }

  // Parameters of the whole model, in floating point so that absurd sizes cannot overflow.
  double approximate_parameter_count() const;

  // Throws vitpipe::Error naming the offending field (`source` is e.g. the config.json path), also for sizes
  // beyond fixed upper bounds and for more parameters than max_model_parameters() (util/size_limits.h).
  void validate(const std::string& source) const;
};

const char* problem_type_name(ProblemType type);  // transformers' spelling

// int(hidden * mlp_ratio), and for SwiGLU (int(that * 2 / 3) + 7) // 8 * 8 (Dinov2SwiGLUFFN).
int64_t dinov2_intermediate_size(int64_t hidden_size, double mlp_ratio, bool swiglu);

}  // namespace vitpipe
