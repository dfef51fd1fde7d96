// `--model` accepts a local directory or a Hugging Face Hub repo id ("google/vit-base-patch16-224-in21k").
// A repo id resolves through the local Hugging Face cache (HF_HUB_CACHE, HF_HOME, ~/.cache/huggingface/hub;
// refs/<revision> -> commit -> snapshots/<commit>) with no network; a model not cached is downloaded first
// (see hub_snapshot.h) unless HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE is set or downloads are disabled.
#pragma once

#include <filesystem>
#include <string>

namespace vitpipe {

struct ModelReferenceOptions {
  std::string revision = "main";  // branch, tag or 40-hex commit; for repo ids only
  bool allow_download = true;     // ignored (treated as false) when HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE is set
};

// Returns a directory holding config.json and the weights. An existing directory is returned as is (it wins over a
// repo id of the same spelling). Throws vitpipe::Error saying what was looked for where and how to get it when the
// model is not available, and tells a path that does not exist apart from a repo id.
std::filesystem::path resolve_model_reference(const std::string& reference, const ModelReferenceOptions& options = {});

}  // namespace vitpipe
