// The multipart reader of `vitpipe serve` (STOW-RS request bodies). The first byte picks what is read; the input's
// first line (up to '\n') is the Content-Type value (or the boundary), the rest the body. Beyond "parse or refuse":
// every part's body lies inside the input, and a parsed body written out again canonically parses to the same parts.
#include <cstdlib>

#include "fuzz_common.h"
#include "serve/multipart_reader.h"

namespace {

void require_inside(std::string_view view, std::string_view buffer) {
  if (view.data() < buffer.data() || view.data() + view.size() > buffer.data() + buffer.size()) {
    std::fprintf(stderr, "fuzz: a part's body is not inside the input\n");
    std::abort();
  }
}

// The parts as a client would write them (CRLF, "name: value", an empty line), parsed again: the same parts.
void require_round_trip(const std::vector<vitpipe::MultipartPart>& parts, std::string_view boundary) {
  std::string body;
  for (const auto& part : parts) {
    body.append("--").append(boundary).append("\r\n");
    for (const auto& [name, value] : part.headers) body.append(name).append(": ").append(value).append("\r\n");
    body.append("\r\n").append(part.body).append("\r\n");
  }
  body.append("--").append(boundary).append("--");
  vitpipe::MultipartLimits unlimited;
  unlimited.max_header_bytes = body.size() + 1;
  unlimited.max_parts = parts.size();
  const auto again = vitpipe::parse_multipart(body, boundary, unlimited);
  bool same = again.size() == parts.size();
  for (size_t i = 0; same && i < parts.size(); ++i)
    same = again[i].body == parts[i].body && again[i].headers == parts[i].headers;
  if (!same) {
    std::fprintf(stderr, "fuzz: the parts written out again parse differently\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 3;
  const std::string_view input = vitpipe::fuzz::as_text(data + 1, size - 1);
  const size_t line_feed = input.find('\n');
  const std::string_view first_line = input.substr(0, line_feed);
  const std::string_view body =
      line_feed == std::string_view::npos ? input.substr(input.size()) : input.substr(line_feed + 1);
  vitpipe::fuzz::expect_parse_or_refusal([&] {
    switch (mode) {
      case 0: {  // a STOW-RS request: Content-Type, body
        for (const std::string_view instance : vitpipe::dicom_parts_of_stow_request(first_line, body))
          require_inside(instance, body);
        break;
      }
      case 1: {  // a boundary as is and a body, under small limits
        vitpipe::MultipartLimits limits;
        limits.max_parts = 16;
        limits.max_header_bytes = 256;
        const auto parts = vitpipe::parse_multipart(body, first_line, limits);
        if (parts.size() > limits.max_parts) std::abort();
        for (const auto& part : parts) require_inside(part.body, body);
        require_round_trip(parts, first_line);
        break;
      }
      default: {  // a Content-Type value alone
        const vitpipe::MediaType media = vitpipe::parse_media_type(input);
        if (media.type.empty() || media.subtype.empty()) std::abort();
        break;
      }
    }
  });
  return 0;
}
