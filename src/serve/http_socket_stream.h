// One accepted HTTP connection as cpp-httplib's Stream: reads are buffered (so requests that arrive pipelined in one
// packet stay in order for the next request), every read waits at most until the request's header deadline or the
// per-read timeout, and writes send the whole buffer or fail. The connection server owns the socket.
#pragma once

#include <httplib.h>

#include <chrono>
#include <string>

namespace vitpipe {

class HttpSocketStream final : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;

  HttpSocketStream(int socket, std::string peer_address, int peer_port, std::chrono::milliseconds read_timeout,
                   std::chrono::milliseconds write_timeout);

  // Reads until `deadline` at the latest (the request's header deadline); Clock::time_point::max() for none.
  void set_deadline(Clock::time_point deadline) { deadline_ = deadline; }
  // Bytes received but not yet read: the start of a pipelined request.
  size_t buffered() const { return end_ - begin_; }
  // True once a read gave up at the deadline (the request is answered 408 and the connection closed).
  bool deadline_passed() const { return deadline_passed_; }

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return socket_; }

 private:
  // Waits for `events` until `timeout` (and the deadline, when bounded by it); false on timeout or error.
  bool wait_for(short events, std::chrono::milliseconds timeout, bool bounded_by_deadline) const;

  int socket_;
  std::string peer_address_;
  int peer_port_;
  std::chrono::milliseconds read_timeout_, write_timeout_;
  Clock::time_point deadline_ = Clock::time_point::max();
  mutable bool deadline_passed_ = false;
  char buffer_[16384];
  size_t begin_ = 0, end_ = 0;
};

}  // namespace vitpipe
