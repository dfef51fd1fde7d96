#include "serve/http_service.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include "serve/try_page.h"
#include "serve/try_page_policy.h"
#include "util/json_error_detail.h"
#include "util/log.h"

namespace vitpipe {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxFormParts = 1000;
// An oversized body is read (and dropped) up to this many times --max-body before the connection is cut.
constexpr size_t kDrainFactor = 16;

// Text from a client (a path, a file name, a UID) may be any bytes: invalid UTF-8 becomes U+FFFD instead of a throw.
void answer_json(httplib::Response& res, int status, const nlohmann::json& body,
                 const char* type = "application/json") {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", type);
}

// A message may quote a client's bytes (a part's file name): control and non-UTF-8 bytes go out as \xNN, not as
// U+FFFD or a raw escape sequence for the client's terminal.
void answer_error(httplib::Response& res, int status, const std::string& message) {
  answer_json(res, status, {{"error", escape_message_bytes(message)}});
}

// An unauthenticated client's body is read at most this far before the 401 and a closed connection: enough for an
// ordinary request to get its answer without a reset, too little to occupy a thread for long.
constexpr size_t kUnauthenticatedDrain = size_t{1} << 20;

// Bytes a client sent, fit for a log line: printable ASCII kept, the rest escaped, and cut at 200 characters.
std::string printable(const std::string& text) {
  std::string out;
  for (const unsigned char c : text.substr(0, 200)) {
    if (c >= 0x20 && c < 0x7f)
      out += static_cast<char>(c);
    else
      out += concat("\\x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
  }
  return text.size() > 200 ? out + "..." : out;
}

// ?heatmap=METHOD and ?finding=NAME (a label of the model; without it each image's most probable one).
std::optional<HeatmapRequest> heatmap_request(const httplib::Request& req, const std::vector<std::string>& labels) {
  if (!req.has_param("heatmap")) {
    if (req.has_param("finding")) throw HttpError(400, "?finding=: give ?heatmap=METHOD too (the map to draw)");
    return std::nullopt;
  }
  // The values are a client's bytes: escaped in the answer (a NUL cut the message there, '?finding=Mass').
  HeatmapRequest out;
  const std::string method = req.get_param_value("heatmap");
  try {
    out.method = parse_explain_method(method);
  } catch (const Error&) {
    throw HttpError(400, concat("?heatmap=", printable(method),
                                ": unknown method (expected one of: rollout, grad-rollout, gradcam)"));
  }
  if (req.has_param("finding")) {
    const std::string finding = req.get_param_value("finding");
    const auto it = std::find(labels.begin(), labels.end(), finding);
    if (it == labels.end()) {
      std::string known;
      for (const auto& label : labels) known += (known.empty() ? "" : ", ") + label;
      throw HttpError(400, concat("?finding=", printable(finding), ": not a label of the model (", known, ")"));
    }
    out.label = it - labels.begin();
  }
  return out;
}

// Releases an admission slot however the handler ends.
struct Admission {
  std::atomic<int64_t>& admitted;
  ~Admission() { --admitted; }
};

}  // namespace

HttpService::HttpService(PredictionService& predictions, ServeMetrics& metrics, nlohmann::json model_info,
                         HttpServiceOptions options)
    : predictions_(predictions),
      metrics_(metrics),
      model_info_(std::move(model_info)),
      options_(std::move(options)),
      server_() {
  VP_REQUIRE(options_.max_queue >= 1, "--max-queue: expected at least 1, got ", options_.max_queue);
  VP_REQUIRE(options_.max_body >= 1024, "--max-body: expected at least 1024 bytes, got ", options_.max_body);
  options_.connections.threads =
      options_.threads > 0 ? options_.threads : static_cast<int>(std::min<int64_t>(options_.max_queue + 8, 4096));
  int& per_address = options_.connections.max_requests_per_address;
  VP_REQUIRE(per_address >= 0, "--max-requests-per-address: expected 0 (half of --http-threads) or more, got ",
             per_address);
  if (per_address == 0) per_address = std::max(1, options_.connections.threads / 2);
  server_ = std::make_unique<HttpConnectionServer>(options_.connections,
                                                   [this](const char* reason) { metrics_.record_refusal(reason); });
  server_->set_payload_max_length(options_.max_body);
  add_routes();
}

HttpService::~HttpService() = default;

void HttpService::bind() {
  VP_REQUIRE(options_.port >= 0 && options_.port <= 65535, "--port: expected 0 (any free port) or 1..65535, got ",
             options_.port);
  server_->bind(options_.host, options_.port);
  port_ = server_->port();
}

void HttpService::serve() { server_->serve(); }

void HttpService::stop() { server_->stop(); }

void HttpService::add_routes() {
  using httplib::ContentReader, httplib::Request, httplib::Response;
  // Every route: the token (but /healthz), errors turned into answers, the metrics and a log line.
  auto run_guarded = [this](const std::string& route, bool needs_token, const Request& req, Response& res,
                            const std::function<void()>& handler) {
    const auto start = Clock::now();
    try {
      if (needs_token && options_.token && !options_.token->accepts(req.get_header_value("Authorization"))) {
        res.set_header("WWW-Authenticate", "Bearer");
        answer_error(res, 401, "a bearer token is required (Authorization: Bearer TOKEN)");
      } else {
        handler();
      }
    } catch (const HttpError& e) {
      if (e.status == 503) res.set_header("Retry-After", "1");
      answer_error(res, e.status, e.what());
    } catch (const std::bad_alloc&) {
      answer_error(res, 503, "out of memory");
    } catch (const std::exception& e) {
      answer_error(res, 500, e.what());
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    metrics_.record_request(route, res.status, seconds);
    // Refusals are logged with their reason (a client's mistake is easier to find in the log than in its code).
    std::string reason;
    if (res.status >= 400 && res.body.size() < 2048) {
      const auto body = nlohmann::json::parse(res.body, nullptr, false);
      if (body.is_object() && body.contains("error") && body["error"].is_string())
        reason = ": " + body["error"].get<std::string>();
    }
    info(printable(req.method), " ", route, " ", res.status, " ", static_cast<int64_t>(seconds * 1000), " ms",
         printable(reason));
  };
  auto guarded = [run_guarded](std::string route, bool needs_token, auto handler) -> httplib::Server::Handler {
    return [=](const Request& req, Response& res) {
      run_guarded(route, needs_token, req, res, [&] { handler(req, res); });
    };
  };
  // A body the handler left unread (an early refusal) is read and dropped before the answer goes: closing a socket
  // with unread bytes makes TCP reset the connection, and the client may lose the answer.
  auto guarded_reader = [this, run_guarded](std::string route,
                                            auto handler) -> httplib::Server::HandlerWithContentReader {
    return [=, this](const Request& req, Response& res, const ContentReader& reader) {
      bool read = false;
      const ContentReader tracked(
          [&](httplib::ContentReceiver receiver) {
            read = true;
            return reader(std::move(receiver));
          },
          [&](httplib::MultipartContentHeader header, httplib::ContentReceiver receiver) {
            read = true;
            return reader(std::move(header), std::move(receiver));
          });
      run_guarded(route, true, req, res, [&] { handler(req, res, tracked); });
      if (read) return;
      size_t total = 0;
      const size_t limit = res.status == 401 ? kUnauthenticatedDrain : kDrainFactor * options_.max_body;
      auto drop = [&](const char*, size_t size) { return (total += size) <= limit; };
      const bool drained = req.is_multipart_form_data()
                               ? reader([](const httplib::MultipartFormData&) { return true; }, drop)
                               : reader(drop);
      if (!drained) {
        res.set_header("Connection", "close");
        HttpConnectionServer::close_after_answer();
      }
    };
  };

  server_->Get("/healthz", guarded("/healthz", false, [](const Request&, Response& res) {
                 answer_json(res, 200, {{"status", "ok"}});
               }));
  // The try-it page: public like /healthz (it holds nothing of the model; its requests carry the token). The policy
  // lets it reach this server alone: no CDN, no other origin, no frames.
  // Its inline script and style are allowed by their hashes, not by 'unsafe-inline'.
  static const std::string policy = inline_content_security_policy(try_page_html());
  server_->Get("/", guarded("/", false, [](const Request&, Response& res) {
                 res.status = 200;
                 res.set_header("Content-Security-Policy", policy);
                 res.set_header("X-Content-Type-Options", "nosniff");
                 res.set_header("Referrer-Policy", "no-referrer");
                 res.set_header("Cache-Control", "no-cache");
                 res.set_content(std::string(try_page_html()), "text/html; charset=utf-8");
               }));
  server_->Get("/readyz", guarded("/readyz", true, [this](const Request&, Response& res) {
                 if (ready_)
                   answer_json(res, 200, {{"status", "ready"}});
                 else
                   answer_json(res, 503, {{"status", "loading"}});
               }));
  server_->Get("/v1/model", guarded("/v1/model", true,
                                    [this](const Request&, Response& res) { answer_json(res, 200, model_info_); }));
  server_->Get("/metrics", guarded("/metrics", true, [this](const Request&, Response& res) {
                 res.status = 200;
                 res.set_content(metrics_.prometheus_text(), "text/plain; version=0.0.4");
               }));

  // The body, read as it arrives and cut off past --max-body (a chunked body has no length to check up front).
  // False with the answer set when it cannot be read whole.
  auto read_body = [this](const Request& req, Response& res, const ContentReader& reader, std::string* body) {
    bool too_large = false;
    bool read = true;
    // cpp-httplib parses multipart/form-data itself (read_form_data); it must not reach a plain receiver.
    VP_REQUIRE(!req.is_multipart_form_data(), "read_body: form-data");
    size_t total = 0;
    read = reader([&](const char* data, size_t size) {
      total += size;
      too_large = too_large || total > options_.max_body;
      if (!too_large) body->append(data, size);
      return total <= kDrainFactor * options_.max_body;  // read on (dropped) to answer 413 without a reset
    });
    if (read && !too_large) return true;
    if (!read) {  // the rest of the body was not read
      res.set_header("Connection", "close");
      HttpConnectionServer::close_after_answer();
    }
    if (too_large || res.status == 413)
      answer_error(res, 413, concat("the request body is larger than --max-body (", options_.max_body, " bytes)"));
    else
      answer_error(res, 400, "the request body could not be read (truncated or malformed)");
    return false;
  };

  // Admits a prediction request, or answers 503 with Retry-After when --max-queue are already in.
  auto admit = [this](Response& res) {
    if (admitted_.fetch_add(1) >= options_.max_queue) {
      --admitted_;
      res.set_header("Retry-After", "1");
      answer_error(res, 503, concat("busy: ", options_.max_queue, " requests are already queued (--max-queue)"));
      return false;
    }
    return true;
  };

  server_->Post("/v1/predict", guarded_reader("/v1/predict", [this, read_body, admit](const Request& req, Response& res,
                                                                                      const ContentReader& reader) {
                  if (!admit(res)) return;
                  Admission admission{admitted_};
                  const std::optional<HeatmapRequest> heatmap = heatmap_request(req, predictions_.labels());
                  if (req.is_multipart_form_data()) {
                    // cpp-httplib's form-data parser, its bytes counted as they arrive.
                    std::vector<std::string> names, bodies;
                    size_t total = 0;
                    bool too_large = false, too_many = false;
                    const bool read = reader(
                        [&](const httplib::MultipartFormData& part) {
                          if (names.size() >= kMaxFormParts) return !(too_many = true);
                          names.push_back(part.filename.empty() ? concat("part ", names.size() + 1) : part.filename);
                          bodies.emplace_back();
                          return true;
                        },
                        [&](const char* data, size_t size) {
                          total += size;
                          too_large = too_large || total > options_.max_body;
                          if (!too_large) bodies.back().append(data, size);
                          return total <= kDrainFactor * options_.max_body;
                        });
                    if (!read || too_large) {
                      if (!read) {
                        res.set_header("Connection", "close");
                        HttpConnectionServer::close_after_answer();
                      }
                      if (too_large || res.status == 413)
                        throw HttpError(
                            413, concat("the request body is larger than --max-body (", options_.max_body, " bytes)"));
                      if (too_many) throw HttpError(400, concat("multipart body: more than ", kMaxFormParts, " parts"));
                      throw HttpError(400, "multipart/form-data body: truncated or malformed");
                    }
                    const std::vector<std::string_view> images(bodies.begin(), bodies.end());
                    answer_json(res, 200, predictions_.predict_images(names, images, heatmap));
                    return;
                  }
                  std::string body;
                  if (!read_body(req, res, reader, &body)) return;
                  answer_json(res, 200, predictions_.predict_body(req.get_header_value("Content-Type"), body, heatmap));
                }));
  server_->Post("/dicomweb/studies",
                guarded_reader("/dicomweb/studies", [this, read_body, admit](const Request& req, Response& res,
                                                                             const ContentReader& reader) {
                  if (!admit(res)) return;
                  Admission admission{admitted_};
                  std::string body;
                  if (!read_body(req, res, reader, &body)) return;
                  int status = 200;
                  const nlohmann::json answer =
                      predictions_.store_instances(req.get_header_value("Content-Type"), body, &status);
                  answer_json(res, status, answer, "application/dicom+json");
                }));
  // cpp-httplib calls this outside its exception guard: it must not throw. What it answers (no route, a malformed
  // request) no route handler counted, so it is counted and logged here.
  server_->set_error_handler([this](const Request& req, Response& res) {
    try {
      if (!res.body.empty()) return;
      const std::string what =
          res.status == 404   ? concat("no route ", req.method, " ", req.path)
          : res.status == 400 ? std::string("malformed request or unsupported method")
          : res.status == 413 ? concat("the request body is larger than --max-body (", options_.max_body, " bytes)")
          : res.status == 414 ? concat("the request target (path and query) is longer than ",
                                       CPPHTTPLIB_REQUEST_URI_MAX_LENGTH, " bytes")
                              : concat("HTTP ", res.status);
      answer_error(res, res.status, what);
      metrics_.record_request(res.status == 404 ? "unmatched" : "malformed", res.status, 0);
      info(printable(req.method), " ", printable(req.path), " ", res.status, " 0 ms: ", printable(what));
    } catch (...) {
      res.set_content("{\"error\":\"bad request\"}\n", "application/json");
    }
  });
  server_->set_exception_handler([](const Request&, Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content("{\"error\":\"internal error\"}\n", "application/json");
  });
}

}  // namespace vitpipe
