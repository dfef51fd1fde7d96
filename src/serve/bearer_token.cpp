#include "serve/bearer_token.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cctype>

#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe {
namespace {

std::array<unsigned char, 32> sha256(std::string_view text) {
  std::array<unsigned char, 32> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return digest;
}

bool b64token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' || c == '~' || c == '+' ||
         c == '/' || c == '=';
}

}  // namespace

BearerToken::BearerToken(const std::filesystem::path& file) {
  // A folder opens and reads as empty: it was refused as "the first line is empty".
  VP_REQUIRE(!std::filesystem::is_directory(file), "--token-file: ", file.string(),
             ": is a folder (expected a file whose first line is the token)");
  std::string text;
  try {
    text = read_text_file(file);
  } catch (const std::exception& e) {
    fail("--token-file: cannot read ", file.string(), " (", e.what(), ")");
  }
  std::string token = text.substr(0, text.find('\n'));
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ' || token.back() == '\t')) token.pop_back();
  VP_REQUIRE(!token.empty(), "--token-file: ", file.string(), ": the first line is empty (expected the token)");
  for (char c : token)
    VP_REQUIRE(b64token_char(c), "--token-file: ", file.string(),
               ": the token may hold only letters, digits and -._~+/= (RFC 6750)");
  digest_ = sha256(token);
}

bool BearerToken::accepts(std::string_view authorization) const {
  constexpr std::string_view scheme = "bearer ";
  if (authorization.size() < scheme.size()) return false;
  for (size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i]) return false;
  std::string_view token = authorization.substr(scheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  const auto digest = sha256(token);
  return CRYPTO_memcmp(digest.data(), digest_.data(), digest.size()) == 0;
}

}  // namespace vitpipe
