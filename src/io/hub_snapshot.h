// A model from the Hub as a directory: which files it needs, whether the cache holds them, and fetching them.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/hub_settings.h"

namespace vitpipe {

// What a model directory lacks: config.json, and weights as model.safetensors, model.safetensors.index.json plus
// its shards, pytorch_model.bin, or pytorch_model.bin.index.json plus its shards (in that order of preference).
// preprocessor_config.json is optional. Empty when the directory is complete.
std::vector<std::string> missing_model_files(const std::filesystem::path& dir);

// snapshots/<commit> of a complete cached model (refs/<revision> -> commit; a 40-hex revision is the commit).
// No network. When absent, `why` (if given) says what was looked for and where.
std::optional<std::filesystem::path> find_cached_model(const std::string& repo_id, const std::string& revision,
                                                       const HubSettings& settings, std::string* why = nullptr);

// `vitpipe download`: asks the Hub which commit `revision` names, fetches what the model needs (config.json,
// preprocessor_config.json, the weights) into the cache, points refs/<revision> at the commit and returns
// snapshots/<commit>. Offline (HF_HUB_OFFLINE), returns the cached snapshot or explains how to get one.
std::filesystem::path download_model(const std::string& repo_id, const std::string& revision,
                                     const HubSettings& settings);

// "model X (revision R) is not in the Hugging Face cache: <why>. <reason> Download it with ...".
std::string model_not_cached_message(const std::string& repo_id, const std::string& revision, const std::string& why,
                                     const std::string& reason);

}  // namespace vitpipe
