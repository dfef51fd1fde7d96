// The DICOM node's front door: binds the address asked (no SO_REUSEPORT, so a port in use is refused), accepts TCP
// connections and holds each on epoll, costing no thread, until its whole A-ASSOCIATE-RQ PDU has arrived (peeked,
// not read) within a deadline. DCMTK reads the request on the thread that accepts (ASC_receiveAssociation); given
// only connections whose request is already in, that read cannot wait on a silent client. Connections waiting are
// capped in all and per address; a PDU that is not an A-ASSOCIATE-RQ or claims more than the limit is dropped.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>

namespace vitpipe {

struct DicomConnectionLimits {
  std::chrono::milliseconds request_timeout{10000};  // from connect to the whole A-ASSOCIATE-RQ
  int max_waiting = 64;                              // connections whose request has not arrived yet
  int max_waiting_per_address = 8;
  uint32_t max_request_bytes = 65536;  // an A-ASSOCIATE-RQ with every context vitpipe accepts is ~4 KB
};

class DicomConnectionGate {
 public:
  // Binds HOST:PORT (numeric or a name of this machine) and listens; throws vitpipe::Error with one line naming
  // --dicom-host/--dicom-port ("port P is in use" when another process listens there).
  DicomConnectionGate(const std::string& host, uint16_t port, DicomConnectionLimits limits);
  ~DicomConnectionGate();
  DicomConnectionGate(const DicomConnectionGate&) = delete;
  DicomConnectionGate& operator=(const DicomConnectionGate&) = delete;

  struct Ready {
    int socket;           // blocking again, owned by the caller
    std::string address;  // the peer's numeric address
  };
  // A connection whose A-ASSOCIATE-RQ is in, or nothing after `wait`. Single-threaded: one caller.
  std::optional<Ready> next(std::chrono::milliseconds wait);
  // Counters for logs and tests.
  int64_t dropped() const { return dropped_; }

 private:
  struct Waiting {
    std::string address;
    std::chrono::steady_clock::time_point deadline;
  };
  void accept_all();
  // Whether the socket's request is whole; drops it (and returns false) when it never will be.
  bool request_arrived(int socket);
  void drop(int socket, const char* why);

  DicomConnectionLimits limits_;
  int listen_socket_ = -1, epoll_ = -1;
  std::unordered_map<int, Waiting> waiting_;
  std::deque<Ready> ready_;  // requests in, not yet handed out
  std::unordered_map<std::string, int> per_address_;
  int64_t dropped_ = 0;
};

}  // namespace vitpipe
