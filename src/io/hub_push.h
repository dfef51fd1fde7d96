// `vitpipe push`: a model or adapter folder to a Hub repository as one commit, the way huggingface_hub >= 0.19's
// create_repo + upload_folder do it (hf_api.py, _commit_api.py, lfs.py):
//   POST {endpoint}/api/repos/create {"name", "organization", "private"}        (409: it exists, which is fine)
//   GET  {endpoint}/api/models/{repo}/revision/{revision}                      (the branch's head: parentCommit)
//   POST {endpoint}/api/models/{repo}/preupload/{revision}[?create_pr=1]
//        {"files": [{"path", "size", "sample": base64 of the first 512 bytes}]}
//     -> {"files": [{"path", "uploadMode": "lfs" | "regular", "shouldIgnore", "oid"}]}  (oid: of the file on the
//        branch; a file with the same content here is left out, and nothing changed means no commit)
//   the LFS files the Hub lacks (io/lfs_upload.h), then last of all
//   POST {endpoint}/api/models/{repo}/commit/{revision}[?create_pr=1]   Content-Type: application/x-ndjson
//        {"key": "header", "value": {"summary", "description", "parentCommit"}}
//        {"key": "file", "value": {"path", "content": base64, "encoding": "base64"}}      (regular files)
//        {"key": "lfsFile", "value": {"path", "algo": "sha256", "oid", "size"}}          (LFS files)
//     -> {"commitOid", "commitUrl", "pullRequestUrl"}
// Every call is retried on 429/5xx and broken connections; since the commit is the last call, a failure anywhere
// leaves the repository as it was. The token is required and goes only to the endpoint's host.
#pragma once

#include <filesystem>
#include <string>

#include "io/hub_settings.h"

namespace vitpipe {

struct HubPushOptions {
  std::string repo_id;            // "org/name"
  std::string revision = "main";  // an existing branch
  bool private_repo = false;      // only when the push creates the repository
  bool create_pr = false;         // open a pull request against `revision` instead of committing to it
  std::string message;            // the commit's summary; empty: "Upload <folder> with vitpipe"
  std::string repo_type = "model";
};

struct HubPushResult {
  std::string commit_oid;
  std::string commit_url;
  std::string pull_request_url;  // with create_pr
  size_t files = 0;              // in the commit
  size_t unchanged = 0;          // on the branch already with the same content: left out of it
  size_t lfs_files = 0;          // of which through LFS
  size_t lfs_uploaded = 0;       // LFS objects sent (the others were on the Hub already)
};

// The folder as a push needs it: a directory with config.json and weights (model.safetensors, its sharded index or
// pytorch_model.bin), or adapter_config.json and adapter_model.safetensors / .bin. Checked before the token, so a
// mistyped folder is named first.
void check_push_folder(const std::filesystem::path& folder);

// What can be refused before any request: the repo id, a token, offline mode, the revision's form.
void check_push_request(const HubPushOptions& options, const HubSettings& settings);

HubPushResult push_folder(const std::filesystem::path& folder, const HubPushOptions& options,
                          const HubSettings& settings);

}  // namespace vitpipe
