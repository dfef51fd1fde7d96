// `vitpipe download REPO_ID [--revision R]`: fetches a model from the Hugging Face Hub into the cache Python tools
// share (HF_HUB_CACHE / HF_HOME) and prints its snapshot directory on stdout.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "io/hub_settings.h"
#include "io/hub_snapshot.h"

namespace vitpipe::cli {

void add_download_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "download",
      "Download a model (config.json, preprocessor_config.json, weights) from the Hugging Face Hub into "
      "the shared cache and print its directory");
  auto repo_id = std::make_shared<std::string>();
  auto revision = std::make_shared<std::string>("main");
  cmd->add_option("repo_id", *repo_id, "Hub repo id, e.g. google/vit-base-patch16-224-in21k")->required();
  cmd->add_option("--revision", *revision, "Branch, tag or 40-character commit id")->capture_default_str();
  cmd->footer(
      "Environment: HF_ENDPOINT, HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE, HF_TOKEN (else $HF_HOME/token), "
      "https_proxy.");
  cmd->callback([repo_id, revision] {
    std::filesystem::path dir = download_model(*repo_id, *revision, HubSettings::from_environment());
    std::printf("%s\n", dir.c_str());
  });
}

}  // namespace vitpipe::cli
