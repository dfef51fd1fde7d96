// The HTTP connection server's threads (one watcher, the workers, clients on their own threads): keep-alive
// connections going back and forth between watcher and workers, pipelined requests, clients that close early and a
// stop() while requests run. Not under ThreadSanitizer: the workers run cpp-httplib, which is not instrumented.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "serve/http_connection_server.h"

namespace vitpipe {
namespace {

int connect_to(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(s, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    ::close(s);
    return -1;
  }
  timeval timeout{10, 0};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  return s;
}

// Reads until `count` answers ("HTTP/1.1 " occurrences with their bodies: answers here are tiny) or the peer closes.
int read_answers(int s, int count) {
  std::string data;
  char buffer[4096];
  int seen = 0;
  while (seen < count) {
    const ssize_t n = ::recv(s, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    data.append(buffer, static_cast<size_t>(n));
    seen = 0;
    for (size_t at = data.find("HTTP/1.1 200"); at != std::string::npos; at = data.find("HTTP/1.1 200", at + 1)) ++seen;
  }
  return seen;
}

TEST(HttpConnectionServerThreads, KeepAlivePipeliningEarlyClosesAndStop) {
  HttpConnectionLimits limits;
  limits.threads = 3;
  limits.idle_timeout = std::chrono::milliseconds(300);
  std::atomic<int> refusals{0};
  HttpConnectionServer server(limits, [&](const char*) { ++refusals; });
  std::atomic<int> answered{0};
  server.Get("/ping", [&](const httplib::Request&, httplib::Response& res) {
    ++answered;
    res.set_content("pong", "text/plain");
  });
  server.bind("127.0.0.1", 0);
  const int port = server.port();
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.serve(); });

  const std::string one = "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n";
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c) {
    clients.emplace_back([&, c] {
      for (int round = 0; round < 10; ++round) {
        const int s = connect_to(port);
        if (s < 0) continue;
        // Keep-alive: three requests one after another, then three pipelined in one send.
        for (int i = 0; i < 3; ++i) {
          if (::send(s, one.data(), one.size(), MSG_NOSIGNAL) > 0 && read_answers(s, 1) == 1) ++ok;
        }
        const std::string three = one + one + one;
        if (::send(s, three.data(), three.size(), MSG_NOSIGNAL) > 0 && read_answers(s, 3) == 3) ok += 3;
        if ((round + c) % 3 == 0) {  // a half request, then gone
          ::send(s, "GET /pi", 7, MSG_NOSIGNAL);
        } else if ((round + c) % 3 == 1) {  // idle until the server ends it
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        ::close(s);
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 6 * 10 * 6);
  EXPECT_EQ(answered.load(), 6 * 10 * 6);

  // stop() while a client is mid-conversation: serve() returns, the client sees its connection end.
  const int late = connect_to(port);
  ASSERT_GE(late, 0);
  ASSERT_GT(::send(late, one.data(), one.size(), MSG_NOSIGNAL), 0);
  EXPECT_EQ(read_answers(late, 1), 1);
  server.stop();
  serving.join();
  ::close(late);
  EXPECT_EQ(refusals.load(), 0);
}

}  // namespace
}  // namespace vitpipe
