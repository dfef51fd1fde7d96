#include "io/hub_settings.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace vitpipe {
namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// huggingface_hub's _is_true.
bool is_true(const std::string& value) {
  std::string upper = value;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  return upper == "1" || upper == "ON" || upper == "YES" || upper == "TRUE";
}

std::string trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  size_t end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

std::filesystem::path expand_user(const std::string& path) {
  if (path == "~" || path.starts_with("~/")) {
    std::string home = environment("HOME");
    if (!home.empty()) return std::filesystem::path(home) / path.substr(path.size() > 1 ? 2 : 1);
  }
  return path;
}

}  // namespace

HubSettings HubSettings::from_environment() {
  HubSettings settings;
  std::string endpoint = environment("HF_ENDPOINT");
  if (!endpoint.empty()) settings.endpoint = endpoint;
  while (settings.endpoint.size() > 1 && settings.endpoint.back() == '/') settings.endpoint.pop_back();

  std::filesystem::path home;
  if (std::string hf_home = environment("HF_HOME"); !hf_home.empty()) {
    home = expand_user(hf_home);
  } else if (std::string xdg = environment("XDG_CACHE_HOME"); !xdg.empty()) {
    home = expand_user(xdg) / "huggingface";
  } else {
    home = expand_user("~/.cache/huggingface");
  }
  if (std::string cache = environment("HF_HUB_CACHE"); !cache.empty()) {
    settings.cache_dir = expand_user(cache);
  } else if (std::string legacy = environment("HUGGINGFACE_HUB_CACHE"); !legacy.empty()) {
    settings.cache_dir = expand_user(legacy);
  } else {
    settings.cache_dir = home / "hub";
  }

  settings.offline = is_true(environment("HF_HUB_OFFLINE")) || is_true(environment("TRANSFORMERS_OFFLINE"));

  std::string token_path = environment("HF_TOKEN_PATH");
  settings.token_path = token_path.empty() ? home / "token" : expand_user(token_path);
  if (std::string token = trim(environment("HF_TOKEN")); !token.empty()) {
    settings.token = token;
    settings.token_origin = "HF_TOKEN";
  } else if (std::string legacy = trim(environment("HUGGING_FACE_HUB_TOKEN")); !legacy.empty()) {
    settings.token = legacy;
    settings.token_origin = "HUGGING_FACE_HUB_TOKEN";
  } else {
    std::ifstream in(settings.token_path);
    if (in) {
      std::ostringstream text;
      text << in.rdbuf();
      settings.token = trim(text.str());
      if (!settings.token.empty()) settings.token_origin = settings.token_path.string();
    }
  }

  if (std::string timeout = environment("HF_HUB_DOWNLOAD_TIMEOUT"); !timeout.empty()) {
    int seconds = std::atoi(timeout.c_str());
    if (seconds > 0) settings.timeout_seconds = seconds;
  }
  return settings;
}

bool is_valid_repo_id(std::string_view repo_id) {
  if (repo_id.empty() || repo_id.size() > 96) return false;
  if (repo_id.find("--") != std::string_view::npos || repo_id.find("..") != std::string_view::npos) return false;
  size_t slash = repo_id.find('/');
  if (slash != std::string_view::npos && repo_id.find('/', slash + 1) != std::string_view::npos) return false;
  auto valid_part = [](std::string_view part) {
    if (part.empty()) return false;
    for (char c : part) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
    }
    return part.front() != '-' && part.front() != '.' && part.back() != '-' && part.back() != '.';
  };
  if (slash == std::string_view::npos) return valid_part(repo_id);
  return valid_part(repo_id.substr(0, slash)) && valid_part(repo_id.substr(slash + 1));
}

bool is_commit_hash(std::string_view text) {
  return text.size() == 40 &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool is_safe_repo_path(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.find('\\') != std::string_view::npos ||
      path.find('\0') != std::string_view::npos) {
    return false;
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

}  // namespace vitpipe
