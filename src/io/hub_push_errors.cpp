#include "io/hub_push_errors.h"

#include "util/error.h"

namespace vitpipe {

namespace {

// The path of a URL ("" for "https://host"), without query or fragment.
std::string url_path(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t start = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (start == std::string::npos) return "";
  return url.substr(start, url.find_first_of("?#", start) - start);
}

}  // namespace

std::vector<std::string> hub_write_headers(const HubSettings& settings, const std::string& url) {
  std::vector<std::string> headers = {"Accept-Encoding: identity"};
  // Same scheme, host (any case) and port, and under the endpoint's own path (a mirror may live below one).
  if (!settings.token.empty() && url_origin(url) == url_origin(settings.endpoint) &&
      url_path(url).starts_with(url_path(settings.endpoint) + "/")) {
    headers.push_back("Authorization: Bearer " + settings.token);
  }
  return headers;
}

void fail_push_response(const HttpResponse& response, const HubPushTarget& target, const HubSettings& settings,
                        const std::string& doing) {
  const std::string code = response.header("x-error-code");
  const std::string server = response.header("x-error-message");
  const std::string says = server.empty() ? "" : concat(" (the Hub says: ", server, ")");
  const std::string repo = target.repo_id;
  const std::string unchanged = concat("; nothing was committed to ", repo);
  const bool on_hub = url_origin(response.url) == url_origin(settings.endpoint);

  if (code == "RevisionNotFound") {
    fail("revision '", target.revision, "' does not exist in ", repo, " on ", settings.endpoint,
         ": create the branch first, or leave out --revision to push to main", unchanged, says);
  }
  if (response.status == 401 && on_hub) {
    if (settings.token.empty()) {
      fail("the Hub asked for a token while ", doing,
           " (HTTP 401): set HF_TOKEN or run `huggingface-cli login` with a "
           "write token",
           unchanged, says);
    }
    fail("the Hub rejected the token from ", settings.token_origin, " while ", doing,
         " (HTTP 401 Unauthorized): create a write token at https://huggingface.co/settings/tokens", unchanged, says);
  }
  if (response.status == 403 && on_hub) {
    const std::string owner = repo.substr(0, repo.find('/'));
    fail("the token from ", settings.token_origin, " may not write to ", repo, " (HTTP 403 Forbidden while ", doing,
         "): use a write token of an account that belongs to '", owner, "'", unchanged, says);
  }
  if (response.status == 404 && on_hub) {
    if (code == "RepoNotFound" || code.empty()) {
      fail("repository ", repo, " was not found on ", settings.endpoint, " while ", doing,
           " (HTTP 404): check --repo and that the token's account can see it", unchanged, says);
    }
    fail(doing, ": HTTP 404 from ", response.url, unchanged, says);
  }
  if (response.status == 412) {
    fail(repo, " changed at '", target.revision, "' while this push ran (HTTP 412, someone else committed)", unchanged,
         "; run the same command again", says);
  }
  if (response.status == 429 || response.status >= 500) {
    fail(on_hub ? "the Hub" : concat("the storage host ", url_origin(response.url)), " kept failing with HTTP ",
         response.status, " while ", doing, unchanged, "; run the same command again later", says);
  }
  if (!on_hub) {
    fail("the storage host ", url_origin(response.url), " refused ", doing, " (HTTP ", response.status, ")", unchanged,
         "; run the same command again, the Hub hands out fresh upload links", says);
  }
  fail("unexpected HTTP ", response.status, " from ", response.url, " while ", doing, unchanged, says);
}

}  // namespace vitpipe
