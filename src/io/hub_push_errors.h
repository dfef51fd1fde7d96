// A failed answer during `vitpipe push` as one sentence: what was being done, what the Hub said, what to do, and
// that nothing was committed (the commit is the last call, so any failure leaves the repository as it was).
#pragma once

#include <string>

#include "io/hub_http.h"
#include "io/hub_settings.h"

namespace vitpipe {

struct HubPushTarget {
  std::string repo_id;   // "org/name"
  std::string revision;  // the branch the commit goes to
};

// `doing` says what the request was for: "creating the repository", "uploading model.safetensors".
[[noreturn]] void fail_push_response(const HttpResponse& response, const HubPushTarget& target,
                                     const HubSettings& settings, const std::string& doing);

// The headers of a request to `url`: the token (as huggingface_hub's build_hf_headers sends it) only when the URL is
// on the endpoint's own scheme, host and port; signed storage URLs and other hosts never see it.
std::vector<std::string> hub_write_headers(const HubSettings& settings, const std::string& url);

}  // namespace vitpipe
