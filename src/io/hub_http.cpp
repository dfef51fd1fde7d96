#include "io/hub_http.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>

namespace vitpipe {
namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

std::string trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return "";
  size_t end = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(begin, end - begin + 1));
}

struct Transfer {
  CURL* curl = nullptr;
  HttpResponse response;
  const std::function<void(const HttpResponse&)>* on_headers = nullptr;
  const std::function<void(const char*, size_t)>* sink = nullptr;
  size_t max_body = 0;
  bool headers_delivered = false;
  std::exception_ptr error;

  bool is_success() const { return response.status >= 200 && response.status < 300; }

  void deliver_headers() {
    if (headers_delivered) return;
    headers_delivered = true;
    char* url = nullptr;
    curl_easy_getinfo(curl, CURLINFO_EFFECTIVE_URL, &url);
    if (url != nullptr) response.url = url;
    if (*on_headers && is_success()) (*on_headers)(response);
  }
};

// The body of a POST or PUT, read by curl as it sends: from memory, or from a region of a file with pread.
struct UploadBody {
  const HttpRequest* request = nullptr;
  int fd = -1;
  int64_t sent = 0;
  int64_t length = 0;
  std::exception_ptr error;

  ~UploadBody() {
    if (fd >= 0) ::close(fd);
  }
};

size_t on_upload_read(char* buffer, size_t size, size_t count, void* user) {
  auto* body = static_cast<UploadBody*>(user);
  size_t want = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(size * count), body->length - body->sent));
  if (want == 0) return 0;
  if (body->fd < 0) {
    std::memcpy(buffer, body->request->body.data() + body->sent, want);
  } else {
    ssize_t n;
    do {
      n = ::pread(body->fd, buffer, want, static_cast<off_t>(body->request->body_offset + body->sent));
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
      body->error = std::make_exception_ptr(Error(concat("cannot read ", body->request->body_file.string(), ": ",
                                                         n == 0 ? "the file became shorter" : std::strerror(errno))));
      return CURL_READFUNC_ABORT;
    }
    want = static_cast<size_t>(n);
  }
  body->sent += static_cast<int64_t>(want);
  return want;
}

int on_transfer_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t upload_now) {
  auto* body = static_cast<UploadBody*>(user);
  try {
    if (body->request->on_upload_progress) body->request->on_upload_progress(static_cast<int64_t>(upload_now));
  } catch (...) {
    body->error = std::current_exception();
    return 1;  // aborts the transfer
  }
  return 0;
}

size_t on_header_line(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  std::string_view line(data, size * count);
  if (line.starts_with("HTTP/")) {  // a new response (after a redirect or a 100 Continue)
    transfer->response.headers.clear();
    size_t space = line.find(' ');
    transfer->response.status =
        space == std::string_view::npos ? 0 : std::atol(std::string(line.substr(space + 1, 3)).c_str());
  } else if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    transfer->response.headers[lower(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
  }
  return size * count;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  size_t bytes = size * count;
  try {
    if (transfer->sink != nullptr && *transfer->sink && transfer->is_success()) {
      transfer->deliver_headers();
      (*transfer->sink)(data, bytes);
    } else {
      if (transfer->response.body.size() + bytes > transfer->max_body) {
        throw Error(
            concat("the answer from ", transfer->response.url, " is larger than ", transfer->max_body, " bytes"));
      }
      transfer->response.body.append(data, bytes);
    }
  } catch (...) {
    transfer->error = std::current_exception();
    return 0;  // aborts the transfer
  }
  return bytes;
}

void set_ca_bundle(CURL* curl) {
  for (const char* name : {"CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"}) {
    const char* path = std::getenv(name);
    if (path != nullptr && *path != '\0') {
      curl_easy_setopt(curl, CURLOPT_CAINFO, path);
      return;
    }
  }
}

bool is_retryable(CURLcode code) {
  switch (code) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_TOO_MANY_REDIRECTS:
      return false;
    default:
      return true;
  }
}

}  // namespace

std::string HttpResponse::header(const std::string& lower_case_name) const {
  auto it = headers.find(lower_case_name);
  return it == headers.end() ? std::string() : it->second;
}

HttpResponse http_request(const HttpRequest& request, const std::function<void(const HttpResponse&)>& on_headers,
                          const std::function<void(const char*, size_t)>& sink, size_t max_body) {
  global_init();
  Transfer transfer;
  transfer.curl = curl_easy_init();
  VP_REQUIRE(transfer.curl != nullptr, "cannot initialise libcurl");
  transfer.on_headers = &on_headers;
  transfer.sink = &sink;
  transfer.max_body = max_body;
  transfer.response.url = request.url;
  CURL* curl = transfer.curl;
  char error_text[CURL_ERROR_SIZE] = {0};

  curl_slist* header_list = nullptr;
  for (const std::string& header : request.headers) header_list = curl_slist_append(header_list, header.c_str());

  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  UploadBody upload;
  upload.request = &request;
  if (request.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (request.method == "POST" || request.method == "PUT") {
    if (!request.body_file.empty()) {
      upload.fd = ::open(request.body_file.c_str(), O_RDONLY | O_CLOEXEC);
      if (upload.fd < 0) {
        curl_slist_free_all(header_list);
        curl_easy_cleanup(curl);
        fail("cannot open ", request.body_file.string(), ": ", std::strerror(errno));
      }
      upload.length = request.body_length;
    } else {
      upload.length = static_cast<int64_t>(request.body.size());
    }
    // Without this curl waits for a "100 Continue" that a plain HTTP/1.0 server never sends.
    header_list = curl_slist_append(header_list, "Expect:");
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(upload.length));
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, on_upload_read);
    curl_easy_setopt(curl, CURLOPT_READDATA, &upload);
    if (request.method == "POST") curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "POST");
    if (request.on_upload_progress) {
      curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_transfer_progress);
      curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &upload);
    }
  } else {
    VP_REQUIRE(request.method == "GET", "unsupported HTTP method ", request.method);
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, header_list);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, request.follow_redirects ? 1L : 0L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl, CURLOPT_UNRESTRICTED_AUTH, 0L);  // never forward credentials to another host
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, static_cast<long>(request.timeout_seconds));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, static_cast<long>(request.timeout_seconds));
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "vitpipe/0.1.0; hf_hub-compatible");
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header_line);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_text);
  set_ca_bundle(curl);

  CURLcode code = curl_easy_perform(curl);
  if (code == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &transfer.response.status);
    try {
      if (sink) transfer.deliver_headers();  // an empty body never reached on_body
    } catch (...) {
      transfer.error = std::current_exception();
    }
  }
  char* url = nullptr;
  curl_easy_getinfo(curl, CURLINFO_EFFECTIVE_URL, &url);
  if (url != nullptr) transfer.response.url = url;
  curl_slist_free_all(header_list);
  curl_easy_cleanup(curl);

  if (transfer.error) std::rethrow_exception(transfer.error);
  if (upload.error) std::rethrow_exception(upload.error);
  if (code != CURLE_OK) {
    std::string detail = error_text[0] != '\0' ? error_text : curl_easy_strerror(code);
    throw HttpTransferError(concat(request.method, " ", url_origin(request.url), ": ", detail), is_retryable(code));
  }
  return transfer.response;
}

std::string url_quote(std::string_view text, std::string_view safe) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' ||
        safe.find(static_cast<char>(c)) != std::string_view::npos) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string url_origin(const std::string& url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return "";
  std::string scheme = lower(url.substr(0, scheme_end));
  size_t authority_start = scheme_end + 3;
  size_t authority_end = url.find_first_of("/?#", authority_start);
  std::string authority = url.substr(
      authority_start, authority_end == std::string::npos ? std::string::npos : authority_end - authority_start);
  if (size_t at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
  authority = lower(authority);
  size_t bracket = authority.rfind(']');
  size_t colon = authority.rfind(':');
  if (colon == std::string::npos || (bracket != std::string::npos && colon < bracket)) {
    authority += scheme == "https" ? ":443" : scheme == "http" ? ":80" : "";
  }
  return scheme + "://" + authority;
}

std::string url_join(const std::string& base, const std::string& location) {
  size_t scheme_end = location.find("://");
  if (scheme_end != std::string::npos && location.find_first_of("/?#") > scheme_end) return location;
  if (location.starts_with("//")) return base.substr(0, base.find("://") + 1) + location;
  size_t authority_start = base.find("://");
  authority_start = authority_start == std::string::npos ? 0 : authority_start + 3;
  size_t path_start = base.find('/', authority_start);
  std::string root = path_start == std::string::npos ? base : base.substr(0, path_start);
  if (location.starts_with("/")) return root + location;
  std::string path = path_start == std::string::npos ? "/" : base.substr(path_start);
  path = path.substr(0, path.find_first_of("?#"));
  return root + path.substr(0, path.rfind('/') + 1) + location;
}

}  // namespace vitpipe
