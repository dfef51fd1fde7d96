// A peft LoRA adapter directory (adapter_config.json + adapter_model.safetensors or adapter_model.bin) as a model:
// the base it names is loaded as any model is, and the adapter is merged into it, W += scaling * B . A per adapted
// Linear layer, with peft's rules for which modules are adapted (target_modules as names or a regular expression,
// layers_to_transform / layers_pattern) and at what scaling (rank_pattern / alpha_pattern, use_rslora). Tensors that
// are not LoRA matrices (modules_to_save such as the classifier, biases under bias "all" / "lora_only") replace the
// base's. What vitpipe cannot compute (DoRA, LoRA biases, layer replication, other peft types, Conv2d targets) is
// refused with one line naming the key.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "io/model_files.h"

namespace vitpipe {

// Whether `directory` holds a peft adapter (adapter_config.json).
bool is_peft_adapter_directory(const std::filesystem::path& directory);

// load_model for an adapter directory: the base named by base_model_name_or_path (a local directory, or a Hub id at
// the config's `revision`) loaded with `options`, then the adapter merged. Labels when the adapter carries the
// classifier: a config.json beside the adapter (id2label), else the base's when its classifier has as many outputs,
// else options.labels; a count that disagrees with the classifier is refused.
LoadedModel load_peft_adapter_model(const std::filesystem::path& directory, const LoadOptions& options);

// An adapter as the start of a vitpipe LoRA run (train --model ADAPTER): vitpipe's LoRA settings that compute the
// same (one rank and alpha for every adapted layer, the same sites in every block; rslora's alpha / sqrt(r) folded
// into alpha) and the tensors to start from, by the base layout's parameter names (lora_A / lora_B, and
// modules_to_save such as the classifier). What vitpipe's LoRA cannot represent is refused with one line.
struct PeftTrainingStart {
  std::string base_model;
  std::string revision;
  int64_t rank = 0;
  double alpha = 0;
  std::vector<std::string> sites;  // linear_site_name()s
  std::map<std::string, Tensor> tensors;
};
PeftTrainingStart read_peft_adapter_for_training(const std::filesystem::path& directory);

// The base model reference and revision an adapter directory names (for read_model_preprocessor).
struct PeftBaseReference {
  std::string reference;
  std::string revision;
};
PeftBaseReference peft_base_reference(const std::filesystem::path& directory);

}  // namespace vitpipe
