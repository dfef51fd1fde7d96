#include "model/vit_config.h"

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
  VP_REQUIRE(hidden_act == "gelu", source, ": \"hidden_act\" must be \"gelu\" (exact erf GELU), got \"", hidden_act,
             "\"");
  VP_REQUIRE(layer_norm_eps > 0, source, ": \"layer_norm_eps\" must be positive");
  VP_REQUIRE(initializer_range > 0, source, ": \"initializer_range\" must be positive");
}

const char* problem_type_name(ProblemType type) {
  return type == ProblemType::multi_label ? "multi_label_classification" : "single_label_classification";
}

}  // namespace vitpipe
