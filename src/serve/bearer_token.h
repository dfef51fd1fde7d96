// `--token-file FILE`: the bearer token every route but /healthz requires. Compared in constant time (the digests of
// both, so neither the token's bytes nor its length leak through timing); never logged.
#pragma once

#include <array>
#include <filesystem>
#include <string_view>

namespace vitpipe {

class BearerToken {
 public:
  // Reads the first line of `file` (trailing CR/LF and spaces dropped). Throws vitpipe::Error naming the file when it
  // cannot be read, the token is empty, or it holds characters RFC 6750's b64token does not allow.
  explicit BearerToken(const std::filesystem::path& file);
  // `authorization`: the whole Authorization header value ("Bearer TOKEN"; the scheme is case-insensitive).
  bool accepts(std::string_view authorization) const;

 private:
  std::array<unsigned char, 32> digest_{};
};

}  // namespace vitpipe
