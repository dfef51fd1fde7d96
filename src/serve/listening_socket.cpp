#include "serve/listening_socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace vitpipe {

int listen_exclusively(const std::string& host, int port, int backlog, const char* host_flag, const char* port_flag) {
  VP_REQUIRE(port >= 0 && port <= 65535, port_flag, ": expected 1..65535, got ", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int resolved = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  VP_REQUIRE(resolved == 0 && found, host_flag, " ", host, ": not an address of this machine (",
             ::gai_strerror(resolved), ")");
  int listening = -1, error = 0;
  for (addrinfo* a = found; a && listening < 0; a = a->ai_next) {
    const int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (s < 0) continue;
    // SO_REUSEADDR lets a restart bind while old connections linger in TIME_WAIT; on Linux it does not let two
    // listeners share the port (SO_REUSEPORT, which cpp-httplib sets, would).
    const int yes = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(s, a->ai_addr, a->ai_addrlen) == 0 && ::listen(s, backlog) == 0) {
      listening = s;
    } else {
      error = errno;
      ::close(s);
    }
  }
  ::freeaddrinfo(found);
  VP_REQUIRE(error != EADDRINUSE || listening >= 0, port_flag, " ", port, ": port ", port, " is in use on ", host,
             " (another server or program listens there)");
  VP_REQUIRE(listening >= 0, host_flag, " ", host, " ", port_flag, " ", port, ": cannot listen there (",
             std::strerror(error), ")");
  return listening;
}

std::string numeric_address(const sockaddr_storage& address, int* port) {
  char text[INET6_ADDRSTRLEN] = {};
  int number = 0;
  if (address.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    number = ntohs(a->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&address);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr))  // as --allowed-callers resolves an IPv4 host
      ::inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], text, sizeof text);
    else
      ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    number = ntohs(a->sin6_port);
  }
  if (port) *port = number;
  return text;
}

int bound_port(int socket) {
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (::getsockname(socket, reinterpret_cast<sockaddr*>(&bound), &length) != 0) return 0;
  int port = 0;
  numeric_address(bound, &port);
  return port;
}

}  // namespace vitpipe
