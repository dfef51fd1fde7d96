// The Hugging Face Hub's protocol as huggingface_hub speaks it:
//   GET  {endpoint}/api/models/{repo}/revision/{revision}    -> {"sha": commit, "siblings": [{"rfilename": ...}]}
//   HEAD {endpoint}/{repo}/resolve/{revision}/{file}         -> X-Repo-Commit, X-Linked-Etag or ETag,
//                                                               X-Linked-Size or Content-Length, Location (LFS)
//   GET  the Location (a storage host: without the Authorization header), resumed with Range after interruptions
// Errors (X-Error-Code RepoNotFound / RevisionNotFound / EntryNotFound / GatedRepo, HTTP 401/403/404) become plain
// sentences. The token is sent as "Authorization: Bearer" only with the Hub's own api/ and resolve/ requests: never
// to a redirect's storage target, whatever its host (a mirror may serve signed storage URLs from its own host and
// port), and it never appears in a message. Redirects are followed by hand so curl cannot forward it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/hub_cache.h"
#include "io/hub_http.h"
#include "io/hub_settings.h"

namespace vitpipe {

struct HubRepoInfo {
  std::string commit;              // "sha": the 40-hex commit the revision points to
  std::vector<std::string> files;  // "siblings[].rfilename"
};

struct HubFileMetadata {
  std::string commit;    // X-Repo-Commit
  std::string etag;      // X-Linked-Etag or ETag, without W/ and quotes: the blob's name in the cache
  int64_t size = -1;     // X-Linked-Size or Content-Length
  std::string location;  // where the bytes are: a redirect's target (storage host) or the resolve URL itself
  bool location_is_storage = false;  // `location` came from an absolute redirect: it gets no credentials
  bool is_lfs() const;               // the etag is a sha256 the downloaded bytes must match
};

class HubClient {
 public:
  explicit HubClient(HubSettings settings);
  const HubSettings& settings() const { return settings_; }

  HubRepoInfo repo_info(const std::string& repo_id, const std::string& revision) const;
  HubFileMetadata file_metadata(const std::string& repo_id, const std::string& filename,
                                const std::string& revision) const;

  // huggingface_hub's hf_hub_download at a known commit: returns snapshots/<commit>/<filename>, downloading the
  // blob (under a lock, into <etag>.incomplete, resumable, size- and sha256-checked) unless it is cached already.
  std::filesystem::path download_file(const HubRepoCache& cache, const std::string& filename,
                                      const std::string& commit) const;

  std::string resolve_url(const std::string& repo_id, const std::string& filename, const std::string& revision) const;

 private:
  // With the token when `url` is one of the Hub's api/ or resolve/ requests on the endpoint, without otherwise.
  std::vector<std::string> headers_for(const std::string& url) const;
  bool is_hub_request(const std::string& url) const;
  void fetch_blob(const HubRepoCache& cache, const std::string& filename, const HubFileMetadata& metadata) const;
  HubSettings settings_;
};

// What a failed request was about, to say so in a sentence.
struct HubRequestContext {
  std::string repo_id;
  std::string revision;
  std::string filename;  // empty for repository-level requests
};

// Throws a vitpipe::Error that explains a non-success answer from the Hub.
[[noreturn]] void fail_hub_response(const HttpResponse& response, const HubRequestContext& context,
                                    const HubSettings& settings);

// The etag as huggingface_hub normalises it: W/ prefix and quotes removed.
std::string normalize_etag(const std::string& etag);

}  // namespace vitpipe
