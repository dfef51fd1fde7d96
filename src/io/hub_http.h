// HTTP for the Hub client, through libcurl: TLS with the system's CA store (or CURL_CA_BUNDLE / REQUESTS_CA_BUNDLE /
// SSL_CERT_FILE), proxies from http_proxy / https_proxy / no_proxy (libcurl reads them itself).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace vitpipe {

struct HttpRequest {
  std::string method = "GET";  // "GET", "HEAD", "POST" or "PUT"
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  bool follow_redirects = false;
  int timeout_seconds = 10;  // to connect, and how long a transfer may stall
  // A POST or PUT sends `body`, or when `body_file` is set, `body_length` bytes of that file from `body_offset`
  // (streamed from disk: a multi-gigabyte weight file never sits in memory).
  std::string body;
  std::filesystem::path body_file;
  int64_t body_offset = 0;
  int64_t body_length = 0;
  std::function<void(int64_t sent)> on_upload_progress;  // bytes of the body sent so far
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // of the last response; names lower-case
  std::string body;                            // the body, or for a streamed request a non-2xx body
  std::string url;                             // the URL that gave the last response

  std::string header(const std::string& lower_case_name) const;  // "" when absent
};

// No HTTP answer, or the connection broke mid-transfer.
class HttpTransferError : public Error {
 public:
  HttpTransferError(const std::string& message, bool retryable) : Error(message), retryable_(retryable) {}
  bool retryable() const { return retryable_; }  // false for bad URLs and TLS failures

 private:
  bool retryable_;
};

// Sends the request. Without `sink` the body is kept in memory (at most `max_body` bytes). With `sink`, a 2xx
// body is streamed to it and `on_headers` runs once, after the last response's headers and before any body byte.
// Callbacks may throw; the exception comes out of http_request.
HttpResponse http_request(const HttpRequest& request,
                          const std::function<void(const HttpResponse&)>& on_headers = nullptr,
                          const std::function<void(const char*, size_t)>& sink = nullptr, size_t max_body = 64u << 20);

// Python's urllib.parse.quote: percent-encodes every byte except letters, digits, "_.-~" and `safe`.
std::string url_quote(std::string_view text, std::string_view safe);
// "scheme://host:port" (lower case, default port filled in): what decides whether a redirect leaves the host.
std::string url_origin(const std::string& url);
// Resolves a Location header against the URL that sent it.
std::string url_join(const std::string& base, const std::string& location);

}  // namespace vitpipe
