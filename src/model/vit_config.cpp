#include "model/vit_config.h"

#include <cmath>

#include "util/error.h"

namespace vitpipe {

void ViTConfig::validate(const std::string& source) const {
  auto positive = [&](const char* field, int64_t value) {
    VP_REQUIRE(value > 0, source, ": field \"", field, "\" must be a positive integer, got ", value);
  };
  positive("hidden_size", hidden_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("intermediate_size", intermediate_size);
  positive("image_size", image_size);
  positive("patch_size", patch_size);
  positive("num_channels", num_channels);
  VP_REQUIRE(hidden_size % num_attention_heads == 0, source, ": \"hidden_size\" (", hidden_size,
             ") must be a multiple of \"num_attention_heads\" (", num_attention_heads, ")");
  VP_REQUIRE(image_size % patch_size == 0, source, ": \"image_size\" (", image_size,
             ") must be a multiple of \"patch_size\" (", patch_size, ")");
  VP_REQUIRE(input_image_size >= 0 && input_size() % patch_size == 0, source, ": the input image size (", input_size(),
             ") must be a multiple of \"patch_size\" (", patch_size, ")");
  VP_REQUIRE(position_interpolation != PositionInterpolation::at_load || input_size() == image_size, source, ": a ",
             model_type, " model resizes its position embeddings when loaded; its input size (", input_size(),
             ") must be its image_size (", image_size, ")");
  VP_REQUIRE(hidden_act == "gelu", source, ": \"hidden_act\" must be \"gelu\" (exact erf GELU), got \"", hidden_act,
             "\"");
  VP_REQUIRE(layer_norm_eps > 0, source, ": \"layer_norm_eps\" must be positive");
  VP_REQUIRE(initializer_range > 0, source, ": \"initializer_range\" must be positive");
  VP_REQUIRE(num_register_tokens >= 0 && num_register_tokens <= 1024, source,
             ": \"num_register_tokens\" must be in [0, 1024], got ", num_register_tokens);
  VP_REQUIRE(head != HeadKind::cls_and_distillation || distillation_token, source,
             ": a distillation head needs the distillation token");
}

const char* problem_type_name(ProblemType type) {
  return type == ProblemType::multi_label ? "multi_label_classification" : "single_label_classification";
}

int64_t dinov2_intermediate_size(int64_t hidden_size, double mlp_ratio, bool swiglu) {
  // Python: int(config.hidden_size * config.mlp_ratio); SwiGLU: (int(hidden_features * 2 / 3) + 7) // 8 * 8.
  const int64_t hidden_features = static_cast<int64_t>(static_cast<double>(hidden_size) * mlp_ratio);
  if (!swiglu) return hidden_features;
  const int64_t two_thirds = static_cast<int64_t>(static_cast<double>(hidden_features) * 2.0 / 3.0);
  return (two_thirds + 7) / 8 * 8;
}

}  // namespace vitpipe
