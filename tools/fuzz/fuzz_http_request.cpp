// `vitpipe serve`'s HTTP side as a client's bytes meet it: vitpipe's connection handling
// (serve/http_connection_server.h) in front of cpp-httplib's request parser, with routes shaped like serve's (a GET, a
// POST reading its body, the error handler naming the path in JSON). The input is everything one client sends on one
// connection, then it closes. Beyond "no crash, no sanitizer report": every answer is an HTTP/1.1 status line with a
// status of 100-599, and there are never more answers than requests could have been (one per header end in the input).
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "serve/http_connection_server.h"

namespace {

void answer_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

vitpipe::HttpConnectionServer& server() {
  static vitpipe::HttpConnectionServer* instance = [] {
    vitpipe::HttpConnectionLimits limits;
    limits.header_timeout = std::chrono::milliseconds(200);
    limits.read_timeout = std::chrono::milliseconds(200);
    limits.write_timeout = std::chrono::milliseconds(200);
    auto* s = new vitpipe::HttpConnectionServer(limits, nullptr);
    s->set_payload_max_length(1 << 16);
    s->Get("/healthz", [](const httplib::Request&, httplib::Response& res) { answer_json(res, 200, {{"ok", 1}}); });
    s->Post(
        "/v1/predict", [](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
          std::string body;
          const bool read = req.is_multipart_form_data()
                                ? reader([](const httplib::MultipartFormData&) { return true; },
                                         [&](const char* d, size_t n) { return (body.append(d, n)).size() < 65536; })
                                : reader([&](const char* d, size_t n) { return (body.append(d, n)).size() < 65536; });
          if (!read) vitpipe::HttpConnectionServer::close_after_answer();
          answer_json(res, read ? 200 : 400, {{"bytes", body.size()}, {"param", req.get_param_value("heatmap")}});
        });
    s->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (res.body.empty()) answer_json(res, res.status, {{"error", "no route " + req.method + " " + req.path}});
    });
    return s;
  }();
  return *instance;
}

size_t header_ends(const uint8_t* data, size_t size) {
  size_t n = 0;
  for (size_t i = 0; i + 1 < size; ++i)
    if (data[i] == '\n' && (data[i + 1] == '\n' || (i + 2 < size && data[i + 1] == '\r' && data[i + 2] == '\n'))) ++n;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return 0;
  // The client writes everything and closes its sending side on a thread of its own (the input may exceed what
  // the socket buffers), then reads the answers; the server answers on this thread.
  std::string answers;
  std::thread client([&] {
    size_t sent = 0;
    while (sent < size) {
      const ssize_t n = ::send(pair[0], data + sent, size - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    ::shutdown(pair[0], SHUT_WR);
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::recv(pair[0], buffer, sizeof buffer, 0);
      if (n <= 0) break;
      answers.append(buffer, static_cast<size_t>(n));
    }
  });
  server().answer_until_closed(pair[1], "fuzz");
  client.join();
  ::close(pair[0]);

  // The answers, one after another: status line, headers, Content-Length bytes of body.
  size_t count = 0;
  for (size_t at = 0; at < answers.size(); ++count) {
    const int status = answers.compare(at, 9, "HTTP/1.1 ") == 0 ? std::atoi(answers.substr(at + 9, 3).c_str()) : 0;
    const size_t end = answers.find("\r\n\r\n", at);
    if (status < 100 || status > 599 || end == std::string::npos) {
      std::fprintf(stderr, "fuzz: answer %zu is not a whole HTTP/1.1 answer\n", count + 1);
      std::abort();
    }
    size_t length = 0;
    const size_t field = answers.find("Content-Length: ", at);
    if (field != std::string::npos && field < end) length = std::strtoull(answers.c_str() + field + 16, nullptr, 10);
    // An answer to HEAD names its length but carries no body: then the next answer (or the end) follows at once.
    auto next_answer_at = [&](size_t position) {
      return position == answers.size() ||
             (position < answers.size() && answers.compare(position, 9, "HTTP/1.1 ") == 0);
    };
    const bool bodiless = length > 0 && next_answer_at(end + 4) && !next_answer_at(end + 4 + length);
    at = end + 4 + (bodiless ? 0 : length);
  }
  if (count > header_ends(data, size) + 1) {
    std::fprintf(stderr, "fuzz: %zu answers to at most %zu requests\n", count, header_ends(data, size));
    std::abort();
  }
  return 0;
}
