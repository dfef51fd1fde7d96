#include "model/vit_config.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"
#include "util/size_limits.h"

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
  // Upper bounds far above any real ViT (ViT-22B: 48 layers, hidden 6144), checked before anything is sized from
  // these numbers, so a hostile config cannot make the parameter layout or the weights ask for terabytes.
  auto at_most = [&](const char* field, int64_t value, int64_t limit) {
    VP_REQUIRE(value <= limit, source, ": field \"", field, "\" is ", value, ", more than the limit of ", limit);
  };
  at_most("num_hidden_layers", num_hidden_layers, 1024);
  at_most("hidden_size", hidden_size, 65536);
  at_most("num_attention_heads", num_attention_heads, 4096);
  at_most("intermediate_size", intermediate_size, int64_t{1} << 20);
  at_most("image_size", image_size, 16384);
  at_most("num_channels", num_channels, 64);
  const double parameters = approximate_parameter_count();
  const int64_t max_parameters = max_model_parameters();
  VP_REQUIRE(parameters <= static_cast<double>(max_parameters), source, ": describes a model of ", parameters,
             " parameters, more than the limit of ", max_parameters, " (set VITPIPE_MAX_PARAMETERS to raise it)");
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

double ViTConfig::approximate_parameter_count() const {
  const double d = static_cast<double>(hidden_size), i = static_cast<double>(intermediate_size);
  const double tokens = static_cast<double>(image_size / std::max<int64_t>(1, patch_size));
  const double embeddings =
      static_cast<double>(num_channels * patch_size * patch_size) * d + 2 * d + (tokens * tokens + 1) * d;
  const double block = 4 * (d * d + d) + 4 * d + 2 * d * i + i + d;
  return embeddings + static_cast<double>(num_hidden_layers) * block + 2 * d +
         static_cast<double>(num_labels()) * (d + 1);
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
