#include "io/model_reference.h"

#include <algorithm>
#include <cstdlib>

#include "io/hub_settings.h"
#include "io/hub_snapshot.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

// What a user means as a path, not a repo id: absolute, ./ ../ ~, a trailing slash, more than one '/'.
bool looks_like_path(const std::string& reference) {
  auto slashes = std::count(reference.begin(), reference.end(), '/');
  return reference.starts_with("/") || reference.starts_with("./") || reference.starts_with("../") ||
         reference.starts_with("~") || reference == "." || reference == ".." || reference.ends_with("/") ||
         slashes > 1 || reference.find('\\') != std::string::npos;
}

}  // namespace

std::filesystem::path resolve_model_reference(const std::string& reference, const ModelReferenceOptions& options) {
  VP_REQUIRE(!reference.empty(), "--model is empty: give a model directory or a Hub repo id (org/name)");
  std::filesystem::path path(reference);
  if (reference.starts_with("~/")) {
    if (const char* home = std::getenv("HOME")) path = std::filesystem::path(home) / reference.substr(2);
  }
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) return path;
  if (std::filesystem::exists(path, error)) {
    fail("--model ", reference,
         ": is a file; expected a directory holding config.json and the weights, or a Hub "
         "repo id (org/name)");
  }
  if (looks_like_path(reference)) fail("--model ", reference, ": not a directory (no such path)");
  VP_REQUIRE(is_valid_repo_id(reference), "--model ", reference,
             ": neither an existing directory nor a valid Hub repo id (org/name, letters, digits, '-', '_', '.')");

  HubSettings settings = HubSettings::from_environment();
  std::string why;
  if (auto dir = find_cached_model(reference, options.revision, settings, &why)) return *dir;
  if (settings.offline || !options.allow_download) {
    std::string reason = settings.offline ? "HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set, so nothing is downloaded."
                                          : "Downloading is disabled here.";
    fail("--model ", reference, ": no such local directory, and ",
         model_not_cached_message(reference, options.revision, why, reason));
  }
  info("--model ", reference, " is not in the Hugging Face cache (", why, "); downloading it");
  try {
    return download_model(reference, options.revision, settings);
  } catch (const Error& e) {
    fail("--model ", reference,
         ": no such local directory, not in the Hugging Face cache, and downloading it "
         "failed: ",
         e.what());
  }
}

}  // namespace vitpipe
