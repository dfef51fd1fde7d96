#include "io/hub_client.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "util/digest_hex.h"
#include "util/error.h"
#include "util/json_error_detail.h"
#include "util/log.h"
#include "util/progress.h"

namespace vitpipe {
namespace {

constexpr int kDownloadAttempts = 5;

bool is_sha256(const std::string& text) {
  return text.size() == 64 &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The etag becomes a file name in blobs/: it must not be able to point anywhere else.
bool is_safe_etag(const std::string& etag) {
  return !etag.empty() && etag.size() <= 200 && etag.front() != '.' &&
         std::all_of(etag.begin(), etag.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
         });
}

int64_t parse_size(const std::string& text) {
  if (text.empty()) return -1;
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  return (end != text.c_str() && *end == '\0' && value >= 0) ? static_cast<int64_t>(value) : -1;
}

std::string sha256_of_file(int fd, const std::filesystem::path& path) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  VP_REQUIRE(context && EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) == 1, "cannot initialise sha256");
  std::vector<char> buffer(1 << 20);
  off_t offset = 0;
  while (true) {
    ssize_t n = ::pread(fd, buffer.data(), buffer.size(), offset);
    if (n < 0 && errno == EINTR) continue;
    VP_REQUIRE(n >= 0, "cannot read ", path.string(), ": ", std::strerror(errno));
    if (n == 0) break;
    EVP_DigestUpdate(context.get(), buffer.data(), static_cast<size_t>(n));
    offset += n;
  }
  return finish_digest_hex(context.get());
}

off_t file_size(int fd) {
  struct stat info;
  VP_REQUIRE(::fstat(fd, &info) == 0, "cannot stat a download: ", std::strerror(errno));
  return info.st_size;
}

void truncate_file(int fd, const std::filesystem::path& path) {
  VP_REQUIRE(::ftruncate(fd, 0) == 0, "cannot truncate ", path.string(), ": ", std::strerror(errno));
}

// Hub errors as sentences; the token never appears (only where it came from).
std::string token_hint(const HubSettings& settings) {
  if (!settings.token.empty()) {
    return concat(" A token (from ", settings.token_origin, ") was sent; check that its account can read it.");
  }
  return " If it is private or gated, set HF_TOKEN (or run `huggingface-cli login`) with an account that can read it.";
}

}  // namespace

bool HubFileMetadata::is_lfs() const { return is_sha256(etag); }

std::string normalize_etag(const std::string& etag) {
  std::string text = etag;
  if (text.starts_with("W/")) text = text.substr(2);
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = text.substr(1, text.size() - 2);
  return text;
}

void fail_hub_response(const HttpResponse& response, const HubRequestContext& context, const HubSettings& settings) {
  std::string code = response.header("x-error-code");
  std::string server = response.header("x-error-message");
  std::string says = server.empty() ? "" : concat(" (the Hub says: ", server, ")");
  const std::string& repo = context.repo_id;
  std::string what = context.filename.empty() ? concat("repository '", repo, "'")
                                              : concat("'", context.filename, "' of repository '", repo, "'");
  bool from_storage = !context.filename.empty() && url_origin(response.url) != url_origin(settings.endpoint);

  if (code == "RevisionNotFound") {
    fail("revision '", context.revision, "' does not exist in repository '", repo, "' on ", settings.endpoint,
         " (give a branch, a tag or a full 40-character commit id)", says);
  }
  if (code == "EntryNotFound") {
    fail("file '", context.filename, "' does not exist in repository '", repo, "' at revision '", context.revision, "'",
         says);
  }
  if (code == "GatedRepo") {
    fail("repository '", repo, "' is gated: accept its conditions at ", settings.endpoint, "/", repo,
         " and use a token of an account that has been granted access.",
         settings.token.empty() ? " Set HF_TOKEN or run `huggingface-cli login`."
                                : concat(" The token from ", settings.token_origin, " has no access yet."),
         says);
  }
  if (response.status == 401 && server == "Invalid credentials in Authorization header") {
    fail("the Hub rejected the token from ", settings.token_origin,
         " (invalid credentials): create a new one at https://huggingface.co/settings/tokens, or unset it to "
         "download public models anonymously");
  }
  if (!from_storage && (code == "RepoNotFound" || response.status == 401)) {
    fail("repository '", repo, "' was not found on ", settings.endpoint, ".", token_hint(settings), says);
  }
  if (from_storage) {
    fail("the storage host ", url_origin(response.url), " refused the download of ", what, " (HTTP ", response.status,
         "); try again, the Hub hands out a fresh link each time", says);
  }
  if (response.status == 403) {
    fail("access to ", what, " was refused (HTTP 403 Forbidden).", token_hint(settings), says);
  }
  if (response.status == 404) fail(what, " was not found at ", response.url, " (HTTP 404)", says);
  if (response.status == 429) fail("the Hub is rate-limiting requests (HTTP 429): wait a minute and try again", says);
  if (response.status >= 500) {
    fail("the Hub failed with HTTP ", response.status, " for ", what, "; try again later", says);
  }
  fail("unexpected HTTP ", response.status, " from ", response.url, " for ", what, says);
}

HubClient::HubClient(HubSettings settings) : settings_(std::move(settings)) {}

bool HubClient::is_hub_request(const std::string& url) const {
  if (!url.starts_with(settings_.endpoint + "/")) return false;
  const std::string path = url.substr(settings_.endpoint.size(), url.find_first_of("?#") - settings_.endpoint.size());
  return path.starts_with("/api/") || path.find("/resolve/") != std::string::npos;
}

std::vector<std::string> HubClient::headers_for(const std::string& url) const {
  std::vector<std::string> headers = {"Accept-Encoding: identity"};
  if (!settings_.token.empty() && is_hub_request(url)) headers.push_back("Authorization: Bearer " + settings_.token);
  return headers;
}

std::string HubClient::resolve_url(const std::string& repo_id, const std::string& filename,
                                   const std::string& revision) const {
  return concat(settings_.endpoint, "/", repo_id, "/resolve/", url_quote(revision, ""), "/", url_quote(filename, "/"));
}

HubRepoInfo HubClient::repo_info(const std::string& repo_id, const std::string& revision) const {
  VP_REQUIRE(is_valid_repo_id(repo_id), "'", repo_id, "' is not a valid Hub repo id");
  HttpRequest request;
  request.url = concat(settings_.endpoint, "/api/models/", repo_id, "/revision/", url_quote(revision, ""));
  request.timeout_seconds = settings_.timeout_seconds;
  HttpResponse response;
  // Renamed repositories redirect on the same host; each hop gets the token only if it is an api/ request again.
  for (int hop = 0;; ++hop) {
    request.headers = headers_for(request.url);
    response = http_request(request);
    const std::string location = response.header("location");
    if (response.status < 300 || response.status >= 400 || location.empty()) break;
    VP_REQUIRE(hop < 10, "too many redirects asking for ", request.url);
    request.url = url_join(request.url, location);
  }
  if (response.status != 200) fail_hub_response(response, {repo_id, revision, ""}, settings_);

  HubRepoInfo info;
  try {
    nlohmann::json json = nlohmann::json::parse(response.body);
    info.commit = json.at("sha").get<std::string>();
    if (json.contains("siblings")) {
      for (const auto& sibling : json.at("siblings")) info.files.push_back(sibling.at("rfilename").get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    fail("the answer from ", request.url, " is not the Hub's model info (",
         json_error_detail(e, response.body).substr(1), "); is HF_ENDPOINT (", settings_.endpoint,
         ") a Hugging Face Hub?");
  }
  VP_REQUIRE(is_commit_hash(info.commit), "the Hub's model info for ", repo_id, " has a malformed \"sha\": '",
             info.commit.substr(0, 60), "'");
  return info;
}

HubFileMetadata HubClient::file_metadata(const std::string& repo_id, const std::string& filename,
                                         const std::string& revision) const {
  HttpRequest request;
  request.method = "HEAD";
  request.url = resolve_url(repo_id, filename, revision);
  request.timeout_seconds = settings_.timeout_seconds;
  HttpResponse response;
  // Relative redirects stay on the Hub (renamed repos, resolve-cache) and are followed; an absolute one points at
  // the storage host and is where the bytes are.
  for (int hop = 0;; ++hop) {
    request.headers = headers_for(request.url);
    response = http_request(request);
    std::string location = response.header("location");
    bool relative = !location.empty() && location.find("://") == std::string::npos && !location.starts_with("//");
    if (response.status >= 300 && response.status < 400 && relative) {
      VP_REQUIRE(hop < 10, "too many redirects resolving ", request.url);
      request.url = url_join(request.url, location);
      continue;
    }
    break;
  }
  if (response.status < 200 || response.status >= 400) {
    fail_hub_response(response, {repo_id, revision, filename}, settings_);
  }
  HubFileMetadata metadata;
  metadata.commit = response.header("x-repo-commit");
  std::string linked_etag = response.header("x-linked-etag");
  metadata.etag = normalize_etag(linked_etag.empty() ? response.header("etag") : linked_etag);
  std::string linked_size = response.header("x-linked-size");
  metadata.size = parse_size(linked_size.empty() ? response.header("content-length") : linked_size);
  bool redirected = response.status >= 300 && response.status < 400 && !response.header("location").empty();
  metadata.location = redirected ? url_join(request.url, response.header("location")) : request.url;
  metadata.location_is_storage = redirected;

  VP_REQUIRE(is_commit_hash(metadata.commit), "the answer for ", request.url,
             " has no valid X-Repo-Commit header; is HF_ENDPOINT (", settings_.endpoint, ") a Hugging Face Hub?");
  VP_REQUIRE(is_safe_etag(metadata.etag), "the answer for ", request.url,
             " has no usable ETag (needed to name the file in the cache)");
  return metadata;
}

std::filesystem::path HubClient::download_file(const HubRepoCache& cache, const std::string& filename,
                                               const std::string& commit) const {
  VP_REQUIRE(is_safe_repo_path(filename), "unsafe file name in repository ", cache.repo_id(), ": '", filename, "'");
  if (auto cached = cache.cached_file(commit, filename)) return *cached;
  HubFileMetadata metadata = file_metadata(cache.repo_id(), filename, commit);
  VP_REQUIRE(metadata.commit == commit, "the Hub answered commit ", metadata.commit, " for '", filename,
             "' requested at commit ", commit);
  std::filesystem::path blob = cache.blob_path(metadata.etag);
  if (!std::filesystem::exists(blob)) {
    std::filesystem::create_directories(blob.parent_path());
    FileLock lock(cache.lock_path(metadata.etag),
                  concat("waiting for another process that is downloading ", filename, " of ", cache.repo_id()));
    if (!std::filesystem::exists(blob)) fetch_blob(cache, filename, metadata);
  }
  return cache.link_snapshot_file(commit, filename, metadata.etag);
}

void HubClient::fetch_blob(const HubRepoCache& cache, const std::string& filename,
                           const HubFileMetadata& metadata) const {
  std::filesystem::path incomplete = cache.incomplete_path(metadata.etag);
  int fd = ::open(incomplete.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  VP_REQUIRE(fd >= 0, "cannot create ", incomplete.string(), ": ", std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{fd};

  HttpRequest request;
  request.timeout_seconds = settings_.timeout_seconds;
  // A storage URL (a redirect's target, on any host) gets no credentials, as huggingface_hub does; it is signed.
  std::string url = metadata.location;
  bool storage = metadata.location_is_storage;
  int redirects = 0;

  ProgressBar progress(filename, metadata.size, "B");
  off_t position = 0;
  for (int attempt = 1;; ++attempt) {
    request.url = url;
    const std::vector<std::string> base_headers =
        storage ? std::vector<std::string>{"Accept-Encoding: identity"} : headers_for(url);
    // curl may follow redirects itself only when nothing secret would travel with them.
    request.follow_redirects = std::none_of(base_headers.begin(), base_headers.end(),
                                            [](const std::string& h) { return h.starts_with("Authorization:"); });
    off_t resume = file_size(fd);
    if (metadata.size >= 0 && resume > metadata.size) {
      truncate_file(fd, incomplete);  // a stale partial file from something else: start over
      resume = 0;
    }
    if (metadata.size >= 0 && resume == metadata.size && resume > 0) {
      position = resume;
      break;
    }
    if (resume > 0 && attempt == 1) info("resuming ", filename, " at ", format_bytes(static_cast<double>(resume)));
    request.headers = base_headers;
    if (resume > 0) request.headers.push_back(concat("Range: bytes=", resume, "-"));
    position = resume;

    auto on_headers = [&](const HttpResponse& response) {
      if (response.status == 206) {
        std::string range = response.header("content-range");
        VP_REQUIRE(range.starts_with(concat("bytes ", resume, "-")), "the server answered a request for ", filename,
                   " from byte ", resume, " with Content-Range '", range, "'");
      } else if (resume > 0) {  // the server ignored Range: the whole file comes again
        truncate_file(fd, incomplete);
        position = 0;
      }
    };
    auto sink = [&](const char* data, size_t size) {
      while (size > 0) {
        ssize_t n = ::pwrite(fd, data, size, position);
        if (n < 0 && errno == EINTR) continue;
        VP_REQUIRE(n > 0, "cannot write ", incomplete.string(), ": ", std::strerror(errno));
        data += n;
        size -= static_cast<size_t>(n);
        position += n;
      }
      progress.update(position);
    };
    try {
      HttpResponse response = http_request(request, on_headers, sink);
      const std::string location = response.header("location");
      if (response.status >= 300 && response.status < 400 && !location.empty()) {
        VP_REQUIRE(++redirects <= 10, "too many redirects downloading ", filename, " of ", cache.repo_id());
        url = url_join(response.url, location);
        storage = true;  // a redirect's target: no token from here on
        --attempt;       // a redirect is not a failed attempt
        continue;
      }
      if (response.status == 416) {  // our partial file does not fit the server's: start over
        VP_REQUIRE(attempt < kDownloadAttempts, "the server keeps refusing the range requests for ", filename);
        truncate_file(fd, incomplete);
        continue;
      }
      bool transient = response.status == 429 || response.status >= 500;
      if (transient && attempt < kDownloadAttempts) {
        int wait_seconds = 1 << (attempt - 1);
        warn("downloading ", filename, ": HTTP ", response.status, " from ", url_origin(response.url), "; retrying in ",
             wait_seconds, " s");
        std::this_thread::sleep_for(std::chrono::seconds(wait_seconds));
        continue;
      }
      if (response.status < 200 || response.status >= 300) {
        fail_hub_response(response, {cache.repo_id(), metadata.commit, filename}, settings_);
      }
      break;
    } catch (const HttpTransferError& e) {
      if (!e.retryable() || attempt >= kDownloadAttempts) {
        fail("downloading ", filename, " of ", cache.repo_id(), " failed after ", attempt, " attempts: ", e.what(),
             ". The ", format_bytes(static_cast<double>(file_size(fd))), " received so far are kept in ",
             incomplete.string(), " and the next run resumes from there.");
      }
      int wait_seconds = 1 << (attempt - 1);
      warn("downloading ", filename, " was interrupted (", e.what(), "); resuming at ",
           format_bytes(static_cast<double>(file_size(fd))), " in ", wait_seconds, " s");
      std::this_thread::sleep_for(std::chrono::seconds(wait_seconds));
    }
  }

  off_t received = file_size(fd);
  if (metadata.size >= 0 && received != metadata.size) {
    std::filesystem::remove(incomplete);
    fail("downloaded ", received, " bytes of ", filename, " but the Hub announced ", metadata.size,
         "; the file was discarded, try again");
  }
  if (metadata.is_lfs()) {
    std::string digest = sha256_of_file(fd, incomplete);
    if (digest != metadata.etag) {
      std::filesystem::remove(incomplete);
      fail("the downloaded ", filename, " of ", cache.repo_id(), " is corrupted: its sha256 is ", digest,
           " but the Hub says ", metadata.etag, ". Nothing was kept in the cache; try again.");
    }
  }
  VP_REQUIRE(::fsync(fd) == 0, "cannot flush ", incomplete.string(), ": ", std::strerror(errno));
  std::filesystem::path blob = cache.blob_path(metadata.etag);
  VP_REQUIRE(::rename(incomplete.c_str(), blob.c_str()) == 0, "cannot rename ", incomplete.string(), " to ",
             blob.string(), ": ", std::strerror(errno));
  // On a terminal the bar ends with the elapsed time; in a log the last update already said it all.
  if (ProgressBar::stderr_is_terminal()) progress.finish();
}

}  // namespace vitpipe
