#include "model/presets.h"

#include "util/error.h"

namespace vitpipe {
namespace {

struct Preset {
  const char* name;
  int64_t image, patch, hidden, layers, heads, mlp;
};

constexpr Preset kPresets[] = {
    {"vit-micro", 32, 8, 64, 2, 4, 128},      {"vit-mini", 64, 8, 128, 4, 4, 512},
    {"vit-tiny", 224, 16, 192, 12, 3, 768},   {"vit-small", 224, 16, 384, 12, 6, 1536},
    {"vit-base", 224, 16, 768, 12, 12, 3072},
};

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
  for (const auto& p : kPresets) {
    if (name == p.name) {
      ViTConfig config;
      config.image_size = p.image;
      config.patch_size = p.patch;
      config.hidden_size = p.hidden;
      config.num_hidden_layers = p.layers;
      config.num_attention_heads = p.heads;
      config.intermediate_size = p.mlp;
      return config;
    }
  }
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown preset \"", name, "\"; expected one of: ", known);
}

}  // namespace vitpipe
