#include "serve/http_connection_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "serve/http_socket_stream.h"
#include "serve/listening_socket.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kWatchTickMs = 100;
constexpr auto kLinger = std::chrono::seconds(2);

// Per worker thread: whether the request being answered must close its connection afterwards, and the stream whose
// header deadline ends once routing starts (a body is bounded by the per-read timeout instead).
thread_local bool close_requested = false;
thread_local HttpSocketStream* current_stream = nullptr;

// A whole answer in one non-blocking send; a client that does not read it loses it (it is being refused anyway).
void send_canned(int socket, int status, const char* reason_phrase, const std::string& message) {
  const std::string body = "{\"error\":\"" + message + "\"}\n";
  const std::string answer =
      concat("HTTP/1.1 ", status, " ", reason_phrase, "\r\nContent-Type: application/json\r\nConnection: close\r\n",
             status == 503 ? "Retry-After: 1\r\n" : "", "Content-Length: ", body.size(), "\r\n\r\n", body);
  [[maybe_unused]] const ssize_t sent = ::send(socket, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Where the request line and headers end in what has arrived: the index past the blank line, or 0.
size_t header_end(const char* data, size_t size) {
  for (size_t i = 0; i + 1 < size; ++i) {
    if (data[i] != '\n') continue;
    if (data[i + 1] == '\n') return i + 2;
    if (i + 2 < size && data[i + 1] == '\r' && data[i + 2] == '\n') return i + 3;
  }
  return 0;
}

}  // namespace

HttpConnectionServer::HttpConnectionServer(HttpConnectionLimits limits, RefusalObserver on_refusal)
    : limits_(limits), on_refusal_(std::move(on_refusal)) {
  VP_REQUIRE(limits_.max_connections >= 1, "--max-connections: expected at least 1, got ", limits_.max_connections);
  VP_REQUIRE(limits_.max_connections_per_address >= 1, "--max-connections-per-address: expected at least 1, got ",
             limits_.max_connections_per_address);
  VP_REQUIRE(limits_.threads >= 1, "--http-threads: expected at least 1, got ", limits_.threads);
  VP_REQUIRE(limits_.max_requests_per_address >= 1, "--max-requests-per-address: expected at least 1, got ",
             limits_.max_requests_per_address);
  VP_REQUIRE(limits_.header_timeout.count() >= 100, "--header-timeout: expected at least 0.1 s");
  // A POST without a length would be read until the client closes: answered 411 at once instead. Reading a request
  // after this point is reading its body, bounded per read, not by the header deadline.
  set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (current_stream) current_stream->set_deadline(Clock::time_point::max());
    const bool has_body_method = req.method == "POST" || req.method == "PUT" || req.method == "PATCH";
    if (has_body_method && !req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
      res.status = 411;
      res.set_content("{\"error\":\"a request body needs Content-Length or Transfer-Encoding: chunked\"}\n",
                      "application/json");
      close_requested = true;
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Called once each answer is written: after a malformed or refused request the stream may stand inside its body,
  // so the connection ends rather than parse body bytes as the next request.
  set_logger([](const httplib::Request&, const httplib::Response& res) {
    const int s = res.status;
    if (s == 400 || s == 408 || s == 411 || s == 413 || s == 414 || s == 431 || s >= 500 ||
        res.get_header_value("Connection") == "close")
      close_requested = true;
  });
}

HttpConnectionServer::~HttpConnectionServer() {
  stop();
  for (auto& w : workers_)
    if (w.joinable()) w.join();
  for (const auto& [socket, waiting] : waiting_) ::close(socket);
  for (const auto& r : ready_) ::close(r.socket);
  for (const auto& [socket, waiting] : returned_) ::close(socket);
  if (listen_socket_ >= 0) ::close(listen_socket_);
  if (epoll_ >= 0) ::close(epoll_);
  if (wake_ >= 0) ::close(wake_);
}

void HttpConnectionServer::close_after_answer() { close_requested = true; }

void HttpConnectionServer::answer_until_closed(int socket, const std::string& peer_address) {
  {
    std::lock_guard lock(mutex_);
    ++open_;
    ++per_address_[peer_address];
  }
  answer_connection(Ready{socket, peer_address, 0});
}

void HttpConnectionServer::bind(const std::string& host, int port) {
  listen_socket_ = listen_exclusively(host, port, 1024, "--host", "--port");
  port_ = bound_port(listen_socket_);
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  VP_REQUIRE(epoll_ >= 0 && wake_ >= 0, "serve: epoll/eventfd: ", std::strerror(errno));
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = listen_socket_;
  ::epoll_ctl(epoll_, EPOLL_CTL_ADD, listen_socket_, &e);
  e.data.fd = wake_;
  ::epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &e);
}

void HttpConnectionServer::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_, &one, sizeof one);
}

void HttpConnectionServer::stop() {
  if (stopping_.exchange(true)) return;
  if (wake_ >= 0) wake();
  std::lock_guard lock(mutex_);
  ready_cv_.notify_all();
}

void HttpConnectionServer::serve() {
  VP_REQUIRE(listen_socket_ >= 0, "serve: bind() first");
  watch_thread_ = std::this_thread::get_id();  // watch_loop runs here; set before any worker may read it
  watching_ = true;
  for (int i = 0; i < limits_.threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  watch_loop();
  {
    std::lock_guard lock(mutex_);
    ready_cv_.notify_all();
  }
  for (auto& w : workers_) w.join();
  workers_.clear();
}

void HttpConnectionServer::refuse(int socket, int status, const char* reason, const std::string& address) {
  const char* phrase = status == 503   ? "Service Unavailable"
                       : status == 408 ? "Request Timeout"
                                       : "Request Header Fields Too Large";
  const std::string message = status == 503   ? "busy: too many connections, try again"
                              : status == 408 ? "the request header did not arrive in time"
                                              : "the request header is too large";
  send_canned(socket, status, phrase, message);
  if (on_refusal_) on_refusal_(reason);
  close_gracefully(socket, address, 0);
}

void HttpConnectionServer::close_gracefully(int socket, const std::string& address, int port) {
  ::shutdown(socket, SHUT_WR);
  Waiting lingering{address, port, Clock::now() + kLinger, Phase::lingering};
  if (std::this_thread::get_id() == watch_thread_) {
    watch(socket, std::move(lingering));
    return;
  }
  std::lock_guard lock(mutex_);
  returned_.emplace_back(socket, std::move(lingering));
  wake();
}

void HttpConnectionServer::drain(int socket) {
  auto it = waiting_.find(socket);
  if (it == waiting_.end()) return;
  char sink[16384];
  for (;;) {
    const ssize_t n = ::recv(socket, sink, sizeof sink, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    break;  // the client closed (or reset): done
  }
  const std::string address = it->second.address;
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, socket, nullptr);
  waiting_.erase(it);
  release(socket, address);
}

void HttpConnectionServer::release(int socket, const std::string& address) {
  ::shutdown(socket, SHUT_WR);
  ::close(socket);
  std::lock_guard lock(mutex_);
  --open_;
  if (--per_address_[address] <= 0) per_address_.erase(address);
}

void HttpConnectionServer::watch(int socket, Waiting waiting) {
  epoll_event e{};
  e.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  e.data.fd = socket;
  if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, socket, &e) != 0) {
    release(socket, waiting.address);
    return;
  }
  const Phase phase = waiting.phase;
  waiting_[socket] = std::move(waiting);
  // Bytes may have arrived before the socket was watched (edge-triggered).
  if (phase == Phase::lingering)
    drain(socket);
  else
    examine(socket);
}

void HttpConnectionServer::accept_all() {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t length = sizeof peer;
    const int s = ::accept4(listen_socket_, reinterpret_cast<sockaddr*>(&peer), &length, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (s < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) warn("serve: out of file descriptors; connections wait in the backlog");
      return;
    }
    int port = 0;
    std::string address = numeric_address(peer, &port);
    const int yes = 1;
    // An answer goes out at once, not after the client's delayed ACK (Nagle added ~40 ms per keep-alive request).
    ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    const char* refused = nullptr;
    {
      std::lock_guard lock(mutex_);
      ++open_;
      const int from_address = ++per_address_[address];
      if (open_ > limits_.max_connections)
        refused = "capacity";
      else if (from_address > limits_.max_connections_per_address)
        refused = "per_address";
    }
    if (refused) {
      refuse(s, 503, refused, address);
      continue;
    }
    watch(s, Waiting{std::move(address), port, Clock::now() + limits_.header_timeout, Phase::header});
  }
}

void HttpConnectionServer::examine(int socket) {
  auto it = waiting_.find(socket);
  if (it == waiting_.end()) return;
  if (it->second.phase == Phase::lingering) {
    drain(socket);
    return;
  }
  std::string peeked(limits_.max_header_bytes, '\0');
  const ssize_t n = ::recv(socket, peeked.data(), peeked.size(), MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  Waiting waiting = it->second;
  if (n <= 0) {  // closed by the client, or reset
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, socket, nullptr);
    waiting_.erase(it);
    release(socket, waiting.address);
    return;
  }
  if (waiting.phase == Phase::idle) {  // the next request has begun: its header has the full deadline from now
    it->second.phase = Phase::header;
    it->second.deadline = Clock::now() + limits_.header_timeout;
  }
  if (header_end(peeked.data(), static_cast<size_t>(n)) == 0) {
    if (static_cast<size_t>(n) < limits_.max_header_bytes) return;  // more to come
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, socket, nullptr);
    waiting_.erase(it);
    refuse(socket, 431, "header_too_large", waiting.address);
    return;
  }
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, socket, nullptr);
  waiting_.erase(it);
  std::lock_guard lock(mutex_);
  ready_.push_back(Ready{socket, std::move(waiting.address), waiting.port});
  ready_cv_.notify_one();
}

void HttpConnectionServer::watch_loop() {
  std::vector<epoll_event> events(256);
  auto last_sweep = Clock::now();
  while (!stopping_) {
    const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), kWatchTickMs);
    for (int i = 0; i < n; ++i) {
      const int fd = events[static_cast<size_t>(i)].data.fd;
      if (fd == listen_socket_) {
        accept_all();
      } else if (fd == wake_) {
        uint64_t count;
        [[maybe_unused]] const ssize_t r = ::read(wake_, &count, sizeof count);
      } else {
        examine(fd);
      }
    }
    std::vector<std::pair<int, Waiting>> returned;
    {
      std::lock_guard lock(mutex_);
      returned.swap(returned_);
    }
    for (auto& [socket, waiting] : returned) watch(socket, std::move(waiting));
    const auto now = Clock::now();
    if (now - last_sweep < std::chrono::milliseconds(kWatchTickMs)) continue;
    last_sweep = now;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      const int socket = it->first;
      const Waiting waiting = std::move(it->second);
      it = waiting_.erase(it);
      ::epoll_ctl(epoll_, EPOLL_CTL_DEL, socket, nullptr);
      if (waiting.phase == Phase::header)
        refuse(socket, 408, "header_timeout", waiting.address);
      else
        release(socket, waiting.address);  // an idle keep-alive connection ends; a lingering one has had its time
    }
  }
  // Stopping: connections still waiting for a whole header are closed; those with one are answered.
  for (const auto& [socket, waiting] : waiting_) release(socket, waiting.address);
  waiting_.clear();
  std::vector<std::pair<int, Waiting>> returned;
  {
    std::lock_guard lock(mutex_);
    returned.swap(returned_);
  }
  for (const auto& [socket, waiting] : returned) release(socket, waiting.address);
  ::close(listen_socket_);
  listen_socket_ = -1;
}

void HttpConnectionServer::worker_loop() {
  for (;;) {
    Ready connection;
    {
      std::unique_lock lock(mutex_);
      // The first connection whose address is under its share: others wait in order, on no thread.
      auto next = ready_.end();
      ready_cv_.wait(lock, [&] {
        next = std::find_if(ready_.begin(), ready_.end(), [&](const Ready& r) {
          const auto busy = busy_per_address_.find(r.address);
          return busy == busy_per_address_.end() || busy->second < limits_.max_requests_per_address;
        });
        return next != ready_.end() || (stopping_ && ready_.empty());
      });
      if (next == ready_.end()) return;
      connection = std::move(*next);
      ready_.erase(next);
      ++busy_per_address_[connection.address];
    }
    const std::string address = connection.address;
    answer_connection(std::move(connection));
    {
      std::lock_guard lock(mutex_);
      if (--busy_per_address_[address] <= 0) busy_per_address_.erase(address);
    }
    ready_cv_.notify_all();
  }
}

void HttpConnectionServer::answer_connection(Ready connection) {
  HttpSocketStream stream(connection.socket, connection.address, connection.port, limits_.read_timeout,
                          limits_.write_timeout);
  for (;;) {
    stream.set_deadline(Clock::now() + limits_.header_timeout);
    close_requested = false;
    current_stream = &stream;
    bool client_closes = false;
    bool answered = false;
    try {
      answered = process_request(stream, stopping_.load(), client_closes, [](httplib::Request&) {});
    } catch (const std::exception& e) {
      warn("serve: a request from ", connection.address, " ended its connection: ", e.what());
    }
    current_stream = nullptr;
    if (!answered && stream.deadline_passed()) {
      send_canned(connection.socket, 408, "Request Timeout", "the request header did not arrive in time");
      if (on_refusal_) on_refusal_("header_timeout");
    }
    if (!answered || client_closes || close_requested || stopping_) break;
    if (stream.buffered() > 0 || !watching_) continue;  // a pipelined request: answered next, in order
    std::lock_guard lock(mutex_);
    returned_.emplace_back(connection.socket, Waiting{connection.address, connection.port,
                                                      Clock::now() + limits_.idle_timeout, Phase::idle});
    wake();
    return;
  }
  if (stopping_ || !watching_)
    release(connection.socket, connection.address);
  else
    close_gracefully(connection.socket, connection.address, connection.port);
}

}  // namespace vitpipe
