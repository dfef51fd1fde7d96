#include "io/model_reference.h"

#include "util/error.h"

namespace vitpipe {

// Placeholder until the Hub cache resolver lands: local directories only.
std::filesystem::path resolve_model_reference(const std::string& reference, const ModelReferenceOptions&) {
  std::filesystem::path path(reference);
  VP_REQUIRE(std::filesystem::is_directory(path), "--model ", reference,
             ": not a directory (Hub repo ids are not resolved yet)");
  return path;
}

}  // namespace vitpipe
