// A LoRA-trained model leaves vitpipe both of peft's ways:
//   merged:   W' = W + (lora_alpha / r) B A in every adapted layer (peft's merge_and_unload), a plain model of the
//             family that transformers loads without peft; the default export;
//   adapter:  peft's save_pretrained layout (--export-adapter): adapter_config.json (LoraConfig's fields) and
//             adapter_model.safetensors with peft's key names: "base_model.model.<module>.lora_A.weight" /
//             ".lora_B.weight" (the adapter name removed, as get_peft_model_state_dict does) and the classifier(s)
//             as modules_to_save, "base_model.model.classifier.weight" (ModulesToSaveWrapper.adapter_state_dict).
#pragma once

#include <filesystem>
#include <string>

#include "model/parameter_layout.h"

namespace vitpipe {

// `full`: the whole model in a layout with LoRA matrices. Returns the whole model in the base layout (no LoRA
// matrices), each adapted weight merged, in double and rounded once.
FlatParameters merge_lora(const FlatParameters& full);

// peft's target_modules for the layout's targets: the short names where peft's suffix match is unambiguous
// ("query", "attention.output.dense", "mlp.fc2"), the full module names where it is not (ViT's fc2,
// "output.dense", would also match "attention.output.dense").
std::vector<std::string> peft_target_modules(const ParameterLayout& layout);

// Writes `directory`/adapter_config.json and adapter_model.safetensors (each atomically). `base_model` is what
// goes into base_model_name_or_path.
void write_peft_adapter(const std::filesystem::path& directory, const FlatParameters& full,
                        const std::string& base_model);

}  // namespace vitpipe
