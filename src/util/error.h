// Error reporting: every user-facing failure is a vitpipe::Error whose message names the file, field and expectation.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace vitpipe {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(concat(parts...));
}

}  // namespace vitpipe

// A check that stays on in release builds: the message says what was expected.
#define VP_REQUIRE(cond, ...)       \
  do {                              \
    if (!(cond)) {                  \
      ::vitpipe::fail(__VA_ARGS__); \
    }                               \
  } while (0)
