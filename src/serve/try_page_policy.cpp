#include "serve/try_page_policy.h"

#include <openssl/sha.h>

#include "util/base64.h"
#include "util/error.h"

namespace vitpipe {
namespace {

// 'sha256-BASE64' of every body between `open` and `close` in `page`, space-separated.
std::string body_hashes(std::string_view page, std::string_view open, std::string_view close) {
  std::string out;
  for (size_t at = page.find(open); at != std::string_view::npos; at = page.find(open, at)) {
    const size_t begin = at + open.size();
    const size_t end = page.find(close, begin);
    VP_REQUIRE(end != std::string_view::npos, "the try page: ", open, " without ", close);
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(page.data() + begin), end - begin, digest);
    if (!out.empty()) out += ' ';
    out += "'sha256-";
    out += base64(std::string_view(reinterpret_cast<const char*>(digest), sizeof digest));
    out += '\'';
    at = end + close.size();
  }
  return out;
}

}  // namespace

std::string inline_content_security_policy(std::string_view page) {
  const std::string scripts = body_hashes(page, "<script>", "</script>");
  const std::string styles = body_hashes(page, "<style>", "</style>");
  VP_REQUIRE(!scripts.empty() && !styles.empty(), "the try page holds no <script> or no <style> to allow");
  return "default-src 'none'; script-src " + scripts + "; style-src " + styles +
         "; img-src data: blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
}

}  // namespace vitpipe
