// RFC 4648 base64 with padding: images embedded in the HTML report and in `serve`'s JSON answers.
#pragma once
#include <string>
#include <string_view>

namespace vitpipe {
std::string base64(std::string_view bytes);
}  // namespace vitpipe
