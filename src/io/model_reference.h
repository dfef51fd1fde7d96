// `--model` accepts a local directory or a Hugging Face Hub repo id ("google/vit-base-patch16-224-in21k").
// A repo id resolves through the local Hugging Face cache (HF_HUB_CACHE, HF_HOME, ~/.cache/huggingface/hub).
#pragma once

#include <filesystem>
#include <string>

namespace vitpipe {

struct ModelReferenceOptions {
  std::string revision = "main";
  bool allow_download = true;  // ignored when HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE is set
};

// Returns a directory holding config.json and the weights. Throws vitpipe::Error saying what was looked for and
// how to get it when the model is not available.
std::filesystem::path resolve_model_reference(const std::string& reference, const ModelReferenceOptions& options = {});

}  // namespace vitpipe
