// `vitpipe serve`'s HTTP/1.1 side on Debian's cpp-httplib: the routes, the bounded admission of prediction
// requests (503 with Retry-After when --max-queue requests are already in), body limits counted as bytes arrive
// (a chunked body passes cpp-httplib's own length check), the bearer token, and the request log and metrics.
#pragma once

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "serve/bearer_token.h"
#include "serve/http_connection_server.h"
#include "serve/prediction_service.h"
#include "serve/serve_metrics.h"

namespace vitpipe {

struct HttpServiceOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t max_queue = 64;              // prediction requests admitted at once (decoding, queued or running)
  size_t max_body = size_t{64} << 20;  // bytes
  int threads = 0;                     // requests answered at once; 0: max_queue + 8, so overload is answered with 503
  HttpConnectionLimits connections;    // its `threads` is set from `threads`
  std::optional<BearerToken> token;
};

class HttpService {
 public:
  // `model_info` is GET /v1/model's answer. All references must outlive the service.
  HttpService(PredictionService& predictions, ServeMetrics& metrics, nlohmann::json model_info,
              HttpServiceOptions options);
  ~HttpService();

  // Binds the port (0: a free one, then port() says which; refused when another process listens there); throws
  // vitpipe::Error naming --host/--port.
  void bind();
  int port() const { return port_; }
  // Serves until stop(); requests in flight are answered before it returns.
  void serve();
  void stop();
  void set_ready(bool ready) { ready_ = ready; }

 private:
  void add_routes();

  PredictionService& predictions_;
  ServeMetrics& metrics_;
  nlohmann::json model_info_;
  HttpServiceOptions options_;
  std::unique_ptr<HttpConnectionServer> server_;
  std::atomic<int64_t> admitted_{0};
  std::atomic<bool> ready_{false};
  int port_ = 0;
};

}  // namespace vitpipe
