#include "serve/dicom_callers.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "serve/dicom_identifiers.h"
#include "util/error.h"

namespace vitpipe {

std::vector<DicomCaller> parse_dicom_callers(std::string_view text, const char* flag) {
  std::vector<DicomCaller> callers;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string entry(text.substr(start, comma - start));
    start = comma + 1;
    const size_t at = entry.find('@');
    DicomCaller caller;
    caller.ae_title = entry.substr(0, at);
    VP_REQUIRE(is_valid_ae_title(caller.ae_title), flag, ": \"", entry,
               "\": expected AE or AE@HOST, the AE title 1 to 16 characters without backslash");
    if (at != std::string::npos) {
      const std::string host = entry.substr(at + 1);
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* found = nullptr;
      const int resolved = host.empty() ? EAI_NONAME : ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
      VP_REQUIRE(resolved == 0, flag, ": \"", entry, "\": host \"", host, "\" does not resolve (",
                 ::gai_strerror(resolved), ")");
      for (addrinfo* a = found; a; a = a->ai_next) {
        char address[INET6_ADDRSTRLEN] = {};
        if (a->ai_family == AF_INET)
          ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr, address, sizeof address);
        else if (a->ai_family == AF_INET6)
          ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr, address, sizeof address);
        if (address[0]) caller.addresses.push_back(address);
      }
      ::freeaddrinfo(found);
    }
    callers.push_back(std::move(caller));
    if (comma == text.size()) break;
  }
  return callers;
}

}  // namespace vitpipe
