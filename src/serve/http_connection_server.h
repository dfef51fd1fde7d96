// cpp-httplib's routing behind vitpipe's own connection handling, because cpp-httplib 0.11 gives every connection a
// thread from the moment it is accepted: slow or idle clients then hold every thread, a burst beyond the pool waits
// unanswered, pipelined requests are dropped and a second server can share the port (SO_REUSEPORT).
//
// Here one thread accepts and watches connections on epoll until a whole request header has arrived (peeked, not
// read), within a total header deadline; only then does a worker take the connection, run exactly one request
// through cpp-httplib's `process_request`, answer any pipelined ones in order, and give an idle keep-alive connection
// back to the watcher. Connections are capped in all and per address, beyond which the answer is a fast 503.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace vitpipe {

struct HttpConnectionLimits {
  int max_connections = 1024;                       // open connections at most (idle, arriving or being answered)
  int max_connections_per_address = 128;            // from one client address
  std::chrono::milliseconds header_timeout{10000};  // the whole request line and headers, from the first byte
  std::chrono::milliseconds idle_timeout{5000};     // a keep-alive connection waiting for its next request
  std::chrono::milliseconds read_timeout{30000};    // each wait for more of a body
  std::chrono::milliseconds write_timeout{30000};   // each wait to send more of an answer
  size_t max_header_bytes = 16384;                  // request line and headers
  int threads = 8;                                  // requests answered at once
  // Requests from one address answered at once; more wait, without a thread, for one of its own to end. A client
  // sending headers and then a body byte now and then held a thread each: 72 such connections from one address
  // silenced the service for the 30 s read timeout, again and again.
  int max_requests_per_address = 8;
};

class HttpConnectionServer : public httplib::Server {
 public:
  // Told each connection or request refused before a route saw it: "capacity", "per_address", "header_timeout",
  // "header_too_large".
  using RefusalObserver = std::function<void(const char* reason)>;

  HttpConnectionServer(HttpConnectionLimits limits, RefusalObserver on_refusal);
  ~HttpConnectionServer() override;

  // Binds HOST:PORT (0: a free port, then port() says which) without SO_REUSEPORT; throws vitpipe::Error with one line
  // naming --host/--port when it cannot
  // ("port P is in use" when another process has it).
  void bind(const std::string& host, int port);
  int port() const { return port_; }
  // Serves until stop(); requests being answered or with whole headers already in are answered before it returns.
  void serve();
  void stop();
  // For a handler: close this connection after the answer (its body was not read to the end).
  static void close_after_answer();
  // Answers every request on `socket` on the calling thread until the client closes, then closes it: the fuzz
  // harness's way in (serve() hands connections out from its watcher instead).
  void answer_until_closed(int socket, const std::string& peer_address);

 private:
  enum class Phase {
    header,    // a request is arriving
    idle,      // a keep-alive connection that has not sent a byte of its next request
    lingering  // answered and shut for writing: what the client still sends is read and dropped until it closes,
               // so that closing does not reset the connection before the client has read the answer
  };
  struct Waiting {
    std::string address;
    int port = 0;
    std::chrono::steady_clock::time_point deadline;
    Phase phase = Phase::header;
  };
  struct Ready {
    int socket;
    std::string address;
    int port;
  };

  void watch_loop();
  void worker_loop();
  void answer_connection(Ready connection);
  void accept_all();
  void watch(int socket, Waiting waiting);
  // Peeks at what arrived: whole header, not yet, closed, or too large.
  void examine(int socket);
  void refuse(int socket, int status, const char* reason, const std::string& address);
  void release(int socket, const std::string& address);
  // Shuts the socket for writing and lets the watcher drain it briefly before closing (from any thread).
  void close_gracefully(int socket, const std::string& address, int port);
  void drain(int socket);
  void wake();

  HttpConnectionLimits limits_;
  RefusalObserver on_refusal_;
  int listen_socket_ = -1, epoll_ = -1, wake_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  bool watching_ = false;  // serve() runs its watcher: idle connections go back to it
  std::thread::id watch_thread_;

  std::unordered_map<int, Waiting> waiting_;  // watch thread only
  std::mutex mutex_;                          // below
  std::condition_variable ready_cv_;
  std::deque<Ready> ready_;
  std::vector<std::pair<int, Waiting>> returned_;  // keep-alive connections given back by workers
  std::unordered_map<std::string, int> per_address_;
  std::unordered_map<std::string, int> busy_per_address_;  // requests being answered, by address
  int open_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace vitpipe
