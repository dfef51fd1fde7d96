#include "train/lora_export.h"

#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "io/named_tensors.h"
#include "io/safetensors.h"
#include "model/low_rank_update.h"
#include "model/trainable_set.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe {

FlatParameters merge_lora(const FlatParameters& full) {
  const ParameterLayout& layout = full.layout();
  const LoraSettings& lora = layout.lora();
  VP_REQUIRE(full.first_segment() == 0 && full.last_segment() == layout.num_segments() - 1,
             "merge_lora: the parameters must hold the whole model");
  auto base_layout = std::make_shared<const ParameterLayout>(layout.config());
  FlatParameters merged = FlatParameters::whole_model(base_layout);
  copy_parameters(full, merged);
  if (!lora.enabled()) return merged;
  const ViTConfig& c = layout.config();
  const double scale = lora.scale();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (LinearSite site : lora.targets) {
      const std::string module = linear_module(c, l, site);
      const Tensor a = full.tensor(module + ".lora_A.weight"), b = full.tensor(module + ".lora_B.weight");
      add_low_rank_update(merged.tensor(module + ".weight"), a, b, scale);
    }
  }
  return merged;
}

std::vector<std::string> peft_target_modules(const ParameterLayout& layout) {
  const ViTConfig& c = layout.config();
  std::vector<std::string> targets;
  for (LinearSite site : layout.lora().targets) {
    const std::string module = linear_module(c, 0, site);
    const std::string block = block_prefix(c, 0);
    const std::string suffix = module.substr(block.size());  // e.g. "attention.attention.query", "output.dense"
    if (site == LinearSite::fc2 && !c.dinov2_family()) {
      // ".output.dense" would also match every "attention.output.dense": name each layer's module.
      for (int64_t l = 0; l < c.num_hidden_layers; ++l) targets.push_back(linear_module(c, l, site));
      continue;
    }
    const size_t dot = suffix.rfind('.');
    const std::string leaf = suffix.substr(dot == std::string::npos ? 0 : dot + 1);
    const bool short_name = site == LinearSite::query || site == LinearSite::key || site == LinearSite::value;
    targets.push_back(short_name ? leaf : suffix);
  }
  return targets;
}

void write_peft_adapter(const std::filesystem::path& directory, const FlatParameters& full,
                        const std::string& base_model) {
  const ParameterLayout& layout = full.layout();
  const LoraSettings& lora = layout.lora();
  VP_REQUIRE(lora.enabled(), "--export-adapter: the model has no LoRA matrices");
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  VP_REQUIRE(std::filesystem::is_directory(directory), "cannot create directory ", directory.string(), ": ",
             error.message());
  TensorMap tensors;
  nlohmann::json modules_to_save = nlohmann::json::array();
  std::set<std::string> heads;
  for (const ParamSpec& spec : layout.specs()) {
    if (spec.is_lora()) {
      tensors["base_model.model." + spec.name] = full.tensor(spec);
    } else if (is_classifier_parameter(spec)) {
      tensors["base_model.model." + spec.name] = full.tensor(spec);
      const std::string module = spec.name.substr(0, spec.name.find('.'));
      if (heads.insert(module).second) modules_to_save.push_back(module);
    }
  }
  write_safetensors(directory / "adapter_model.safetensors", tensors, {{"format", "pt"}});
  // Only keys peft 0.6.0's LoraConfig knows: releases 0.6 to 0.13 raise on an unknown key (0.7.1 on "use_dora",
  // then "use_rslora"), and 0.14 on ignore them. A newer key would be written only with a non-default value, and
  // vitpipe trains none (rslora, DoRA, layer replication).
  nlohmann::json config = {{"alpha_pattern", nlohmann::json::object()},
                           {"auto_mapping", nullptr},
                           {"base_model_name_or_path", base_model},
                           {"bias", "none"},
                           {"fan_in_fan_out", false},
                           {"inference_mode", true},
                           {"init_lora_weights", true},
                           {"layers_pattern", nullptr},
                           {"layers_to_transform", nullptr},
                           {"lora_alpha", lora.alpha},
                           {"lora_dropout", 0.0},
                           {"modules_to_save", modules_to_save},
                           {"peft_type", "LORA"},
                           {"r", lora.rank},
                           {"rank_pattern", nlohmann::json::object()},
                           {"revision", nullptr},
                           {"target_modules", peft_target_modules(layout)},
                           {"task_type", nullptr}};
  write_text_file_atomically(directory / "adapter_config.json", config.dump(2) + "\n");
}

}  // namespace vitpipe
