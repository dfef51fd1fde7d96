#include "serve/http_service.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <functional>

#include "util/log.h"

namespace vitpipe {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxFormParts = 1000;
// An oversized body is read (and dropped) up to this many times --max-body before the connection is cut.
constexpr size_t kDrainFactor = 16;

void answer_json(httplib::Response& res, int status, const nlohmann::json& body,
                 const char* type = "application/json") {
  res.status = status;
  res.set_content(body.dump() + "\n", type);
}

void answer_error(httplib::Response& res, int status, const std::string& message) {
  answer_json(res, status, {{"error", message}});
}

// cpp-httplib 0.11 listens with a backlog of 5: a burst of clients overflows it and some see their connection reset
// instead of a 503. Linux lets listen() be called again on the bound socket to raise it.
class ServerWithBacklog : public httplib::Server {
 public:
  void raise_backlog(int backlog) { ::listen(svr_sock_, backlog); }
};

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
      server_(std::make_unique<ServerWithBacklog>()) {
  VP_REQUIRE(options_.max_queue >= 1, "--max-queue: expected at least 1, got ", options_.max_queue);
  VP_REQUIRE(options_.max_body >= 1024, "--max-body: expected at least 1024 bytes, got ", options_.max_body);
  const size_t threads =
      options_.threads > 0 ? static_cast<size_t>(options_.threads) : static_cast<size_t>(options_.max_queue) + 8;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(options_.max_body);
  server_->set_keep_alive_max_count(1000);
  server_->set_keep_alive_timeout(5);
  server_->set_read_timeout(30);
  server_->set_write_timeout(30);
  add_routes();
}

HttpService::~HttpService() = default;

void HttpService::bind() {
  VP_REQUIRE(options_.port >= 1 && options_.port <= 65535, "--port: expected 1..65535, got ", options_.port);
  VP_REQUIRE(server_->bind_to_port(options_.host, options_.port), "--host ", options_.host, " --port ", options_.port,
             ": cannot listen there (address in use, or not an address of this machine)");
  static_cast<ServerWithBacklog&>(*server_).raise_backlog(1024);
  port_ = options_.port;
}

void HttpService::serve() { server_->listen_after_bind(); }

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
    info(req.method, " ", route, " ", res.status, " ", static_cast<int64_t>(seconds * 1000), " ms", reason);
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
      auto drop = [&](const char*, size_t size) { return (total += size) <= kDrainFactor * options_.max_body; };
      const bool drained = req.is_multipart_form_data()
                               ? reader([](const httplib::MultipartFormData&) { return true; }, drop)
                               : reader(drop);
      if (!drained) res.set_header("Connection", "close");
    };
  };

  server_->Get("/healthz", guarded("/healthz", false, [](const Request&, Response& res) {
                 answer_json(res, 200, {{"status", "ok"}});
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
    if (!read) res.set_header("Connection", "close");  // the rest of the body was not read
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
                  std::optional<ExplainMethod> heatmap;
                  if (req.has_param("heatmap")) {
                    try {
                      heatmap = parse_explain_method(req.get_param_value("heatmap"));
                    } catch (const Error& e) {
                      throw HttpError(400, concat("?heatmap=: ", e.what()));
                    }
                  }
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
                      if (!read) res.set_header("Connection", "close");
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
  server_->set_error_handler([this](const Request& req, Response& res) {
    if (res.body.empty()) answer_error(res, res.status, concat("no route ", req.method, " ", req.path));
  });
}

}  // namespace vitpipe
