#include "model/presets.h"

#include "util/error.h"

namespace vitpipe {
namespace {

struct Preset {
  const char* name;
  const char* family;  // "vit" or "dinov2"
  int64_t image, patch, hidden, layers, heads, mlp;
  int64_t input;  // DINOv2: the side its processor crops to (positions interpolated from `image`'s grid)
};

constexpr Preset kPresets[] = {
    {"vit-micro", "vit", 32, 8, 64, 2, 4, 128, 32},
    {"vit-mini", "vit", 64, 8, 128, 4, 4, 512, 64},
    {"vit-tiny", "vit", 224, 16, 192, 12, 3, 768, 224},
    {"vit-small", "vit", 224, 16, 384, 12, 6, 1536, 224},
    {"vit-base", "vit", 224, 16, 768, 12, 12, 3072, 224},
    {"dinov2-micro", "dinov2", 42, 7, 64, 2, 4, 256, 28},  // tests: a 6 x 6 grid fed 4 x 4, as 37 x 37 is fed 16 x 16
    {"dinov2-small", "dinov2", 518, 14, 384, 12, 6, 1536, 224},
    {"dinov2-base", "dinov2", 518, 14, 768, 12, 12, 3072, 224},
    {"rad-dino", "dinov2", 518, 14, 768, 12, 12, 3072, 518},
};

const Preset& find_preset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name == p.name) return p;
  }
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown preset \"", name, "\"; expected one of: ", known);
}

}  // namespace

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& p : kPresets) out.emplace_back(p.name);
    return out;
  }();
  return names;
}

ViTConfig preset_config(const std::string& name) {
  const Preset& p = find_preset(name);
  ViTConfig config;
  config.image_size = p.image;
  config.patch_size = p.patch;
  config.hidden_size = p.hidden;
  config.num_hidden_layers = p.layers;
  config.num_attention_heads = p.heads;
  config.intermediate_size = p.mlp;
  if (std::string(p.family) == "dinov2") {
    // Dinov2Config as released: LayerScale, eps 1e-6, mlp_ratio 4, a mask token, positions interpolated per pass.
    config.model_type = "dinov2";
    config.layer_norm_eps = 1e-6;
    config.layer_scale = true;
    config.mask_token = true;
    config.mlp_ratio = 4.0;
    config.head = HeadKind::cls_and_patch_mean;
    config.position_interpolation = PositionInterpolation::bicubic;
    config.input_image_size = p.input == p.image ? 0 : p.input;
  }
  return config;
}

}  // namespace vitpipe
