#include "serve/dicom_connection_gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "serve/listening_socket.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint8_t kAssociateRequestPdu = 0x01;
constexpr size_t kPduHeaderBytes = 6;  // type, reserved, 32-bit big-endian length

}  // namespace

DicomConnectionGate::DicomConnectionGate(const std::string& host, uint16_t port, DicomConnectionLimits limits)
    : limits_(limits) {
  listen_socket_ = listen_exclusively(host, port, 128, "--dicom-host", "--dicom-port");
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  VP_REQUIRE(epoll_ >= 0, "DICOM node: epoll: ", std::strerror(errno));
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = listen_socket_;
  ::epoll_ctl(epoll_, EPOLL_CTL_ADD, listen_socket_, &e);
}

DicomConnectionGate::~DicomConnectionGate() {
  for (const auto& [socket, waiting] : waiting_) ::close(socket);
  for (const Ready& ready : ready_) ::close(ready.socket);
  if (listen_socket_ >= 0) ::close(listen_socket_);
  if (epoll_ >= 0) ::close(epoll_);
}

void DicomConnectionGate::drop(int socket, const char* why) {
  auto it = waiting_.find(socket);
  if (it != waiting_.end()) {
    info("DICOM node: connection from ", it->second.address, " dropped: ", why);
    if (--per_address_[it->second.address] <= 0) per_address_.erase(it->second.address);
    waiting_.erase(it);
  }
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, socket, nullptr);
  ::close(socket);
  ++dropped_;
}

void DicomConnectionGate::accept_all() {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t length = sizeof peer;
    const int s = ::accept4(listen_socket_, reinterpret_cast<sockaddr*>(&peer), &length, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (s < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    const std::string address = numeric_address(peer);
    if (static_cast<int>(waiting_.size()) >= limits_.max_waiting ||
        per_address_[address] >= limits_.max_waiting_per_address) {
      warn("DICOM node: connection from ", address, " refused: ", waiting_.size(),
           " connections already wait to associate");
      ::close(s);
      ++dropped_;
      continue;
    }
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP | EPOLLET;  // woken as bytes arrive, not while a partial request waits
    e.data.fd = s;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, s, &e) != 0) {
      ::close(s);
      continue;
    }
    ++per_address_[address];
    waiting_[s] = Waiting{address, Clock::now() + limits_.request_timeout};
  }
}

bool DicomConnectionGate::request_arrived(int socket) {
  uint8_t header[kPduHeaderBytes];
  ssize_t n = ::recv(socket, header, sizeof header, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (n == 0 || n < 0) {
    drop(socket, n == 0 ? "closed before its association request" : "reset");
    return false;
  }
  if (header[0] != kAssociateRequestPdu) {
    drop(socket, "the first PDU is not an A-ASSOCIATE-RQ");
    return false;
  }
  if (n < static_cast<ssize_t>(kPduHeaderBytes)) return false;
  const uint32_t length =
      (uint32_t{header[2]} << 24) | (uint32_t{header[3]} << 16) | (uint32_t{header[4]} << 8) | uint32_t{header[5]};
  if (length > limits_.max_request_bytes) {
    drop(socket, "its A-ASSOCIATE-RQ claims more bytes than any request needs");
    return false;
  }
  std::vector<uint8_t> whole(kPduHeaderBytes + length);
  n = ::recv(socket, whole.data(), whole.size(), MSG_PEEK | MSG_DONTWAIT);
  return n == static_cast<ssize_t>(whole.size());
}

std::optional<DicomConnectionGate::Ready> DicomConnectionGate::next(std::chrono::milliseconds wait) {
  const auto until = Clock::now() + wait;
  std::vector<epoll_event> events(64);
  for (;;) {
    // Every event of a wait is handled before any is returned: edge-triggered, an event left over is not repeated.
    if (!ready_.empty()) {
      Ready ready = std::move(ready_.front());
      ready_.pop_front();
      return ready;
    }
    const auto now = Clock::now();
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      const int socket = it->first;
      ++it;
      if (waiting_.at(socket).deadline <= now) drop(socket, "its association request did not arrive in time");
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count();
    if (left <= 0) return std::nullopt;
    const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()),
                               static_cast<int>(std::min<int64_t>(left, 100)));
    for (int i = 0; i < n; ++i) {
      const int fd = events[static_cast<size_t>(i)].data.fd;
      if (fd == listen_socket_) {
        accept_all();
        continue;
      }
      if (!waiting_.count(fd) || !request_arrived(fd)) continue;
      Ready ready{fd, waiting_.at(fd).address};
      if (--per_address_[ready.address] <= 0) per_address_.erase(ready.address);
      waiting_.erase(fd);
      ::epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // DCMTK reads with its own timeouts
      ready_.push_back(std::move(ready));
    }
  }
}

}  // namespace vitpipe
