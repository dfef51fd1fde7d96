// `vitpipe push DIR --repo ORG/NAME`: uploads a model or adapter folder to the Hugging Face Hub as one commit
// (io/hub_push.h) and prints the commit's URL (or the pull request's) on stdout.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "io/hub_push.h"
#include "io/hub_settings.h"

namespace vitpipe::cli {

void add_push_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "push",
      "Upload a model or adapter folder (what train and export write, README.md model card included) to a Hugging "
      "Face Hub repository as one commit, creating the repository if needed; prints the commit's URL");
  auto folder = std::make_shared<std::string>();
  auto options = std::make_shared<HubPushOptions>();
  cmd->add_option(
         "dir", *folder,
         "The model or adapter folder: config.json and weights (model.safetensors, its index or pytorch_model.bin), or "
         "adapter_config.json and adapter_model.safetensors; checked before the token")
      ->required();
  cmd->add_option("--repo", options->repo_id, "Hub repository, ORG/NAME (created if it does not exist)")->required();
  cmd->add_flag("--private", options->private_repo,
                "Create the repository private (an existing one keeps its visibility); default public");
  cmd->add_option("--revision", options->revision, "The branch to commit to; it must exist")->capture_default_str();
  cmd->add_flag("--create-pr", options->create_pr,
                "Open a pull request against --revision with the commit instead of committing to it; default off");
  cmd->add_option("--message", options->message, "The commit message (default: Upload <folder> with vitpipe)");
  cmd->add_option("--repo-type", options->repo_type, "The repository's type: model (the only one vitpipe pushes)")
      ->capture_default_str()
      ->check(CLI::IsMember({"model"}));
  cmd->footer(
      "Environment: HF_TOKEN (else $HF_HOME/token, else ~/.cache/huggingface/token: a write token), HF_ENDPOINT, "
      "https_proxy. Files the Hub already holds are not sent again; failed calls are retried; the commit is the last "
      "call, so a failed push leaves the repository as it was.");
  cmd->callback([folder, options] {
    HubPushResult result = push_folder(*folder, *options, HubSettings::from_environment());
    std::printf("%s\n", result.pull_request_url.empty() ? result.commit_url.c_str() : result.pull_request_url.c_str());
  });
}

}  // namespace vitpipe::cli
