// The Content-Security-Policy the try-it page is served with. Its one inline script and one inline style are allowed
// by their SHA-256 (CSP level 2 hashes) rather than by 'unsafe-inline', so a script that got into the page some other
// way (markup injected through a model's label or card) would not run.
#pragma once

#include <string>
#include <string_view>

namespace vitpipe {

// "default-src 'none'; script-src 'sha256-...'; style-src 'sha256-...'; ..." for `page`: the hash of each
// <script>...</script> and <style>...</style> body, byte for byte. Throws when the page holds neither.
std::string inline_content_security_policy(std::string_view page);

}  // namespace vitpipe
