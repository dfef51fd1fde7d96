// What serve's HTTP server and DICOM node share about their sockets: listening on exactly the address asked without
// SO_REUSEPORT (so a second server on the port is refused, not given half the connections), and addresses as text.
#pragma once

#include <sys/socket.h>

#include <string>

namespace vitpipe {

// A non-blocking socket listening on HOST:PORT (0: any free port). Throws vitpipe::Error with one line naming
// `host_flag` / `port_flag`: "port P is in use" when another process listens there.
int listen_exclusively(const std::string& host, int port, int backlog, const char* host_flag, const char* port_flag);

// The numeric address (an IPv4 client of a dual-stack socket as IPv4) and, when asked, the port.
std::string numeric_address(const sockaddr_storage& address, int* port = nullptr);

// The port a socket is bound to.
int bound_port(int socket);

}  // namespace vitpipe
