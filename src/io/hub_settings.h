// Where the Hugging Face Hub and its cache are, from the same environment variables huggingface_hub reads, so
// vitpipe and Python tools share one cache and one login.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace vitpipe {

struct HubSettings {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT, without a trailing '/'
  // HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub; HF_HOME defaults to $XDG_CACHE_HOME/huggingface,
  // else ~/.cache/huggingface.
  std::filesystem::path cache_dir;
  bool offline = false;              // HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is 1/ON/YES/TRUE
  std::string token;                 // HF_TOKEN, else the token file; empty: anonymous. Never print or log it.
  std::filesystem::path token_path;  // HF_TOKEN_PATH, else $HF_HOME/token
  std::string token_origin;          // "HF_TOKEN" or the token file's path: for messages (never the token)
  int timeout_seconds = 10;          // HF_HUB_DOWNLOAD_TIMEOUT: a transfer stalled this long is retried

  static HubSettings from_environment();
};

// huggingface_hub's validate_repo_id: "name" or "org/name" of [A-Za-z0-9_.-], no "--" or "..", no leading or
// trailing '-' or '.', at most 96 characters.
bool is_valid_repo_id(std::string_view repo_id);

// A full commit id: 40 lowercase hex digits.
bool is_commit_hash(std::string_view text);

// A relative path inside a repository ("config.json", "sub/x.bin"): no "..", no absolute path, no empty parts.
bool is_safe_repo_path(std::string_view path);

}  // namespace vitpipe
