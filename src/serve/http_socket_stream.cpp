#include "serve/http_socket_stream.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "serve/listening_socket.h"

namespace vitpipe {

HttpSocketStream::HttpSocketStream(int socket, std::string peer_address, int peer_port,
                                   std::chrono::milliseconds read_timeout, std::chrono::milliseconds write_timeout)
    : socket_(socket),
      peer_address_(std::move(peer_address)),
      peer_port_(peer_port),
      read_timeout_(read_timeout),
      write_timeout_(write_timeout) {}

bool HttpSocketStream::wait_for(short events, std::chrono::milliseconds timeout, bool bounded_by_deadline) const {
  const auto deadline = bounded_by_deadline ? deadline_ : Clock::time_point::max();
  const auto until = std::min(deadline, Clock::now() + timeout);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) {
      if (until == deadline) deadline_passed_ = true;
      return false;
    }
    pollfd p{socket_, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

bool HttpSocketStream::is_readable() const { return buffered() > 0 || wait_for(POLLIN, read_timeout_, true); }

bool HttpSocketStream::is_writable() const { return wait_for(POLLOUT, write_timeout_, false); }

ssize_t HttpSocketStream::read(char* ptr, size_t size) {
  if (buffered() == 0) {
    if (!wait_for(POLLIN, read_timeout_, true)) return -1;
    ssize_t n;
    do n = ::recv(socket_, buffer_, sizeof buffer_, 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0) return n;
    begin_ = 0;
    end_ = static_cast<size_t>(n);
  }
  const size_t n = std::min(size, buffered());
  std::memcpy(ptr, buffer_ + begin_, n);
  begin_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t HttpSocketStream::write(const char* ptr, size_t size) {
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(socket_, ptr + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // The deadline bounds reading a request, not writing its answer.
      if (!wait_for(POLLOUT, write_timeout_, false)) return -1;
    } else {
      return -1;
    }
  }
  return static_cast<ssize_t>(size);
}

void HttpSocketStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = peer_address_;
  port = peer_port_;
}

void HttpSocketStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  ip.clear();
  port = 0;
  if (::getsockname(socket_, reinterpret_cast<sockaddr*>(&address), &length) == 0) ip = numeric_address(address, &port);
}

}  // namespace vitpipe
