#include "util/size_limits.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "util/error.h"

namespace vitpipe {

int64_t size_limit_from_environment(const char* name, int64_t default_value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return default_value;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  VP_REQUIRE(errno == 0 && end != text && *end == '\0' && value > 0, name, ": expected a positive integer, got '",
             std::string(text).substr(0, 40), "'");
  return static_cast<int64_t>(value);
}

int64_t max_image_pixels() { return size_limit_from_environment("VITPIPE_MAX_IMAGE_PIXELS", int64_t{1} << 28); }

int64_t max_csv_line_bytes() { return size_limit_from_environment("VITPIPE_MAX_CSV_LINE_BYTES", int64_t{1} << 20); }

int64_t max_model_parameters() {
  return size_limit_from_environment("VITPIPE_MAX_PARAMETERS", int64_t{20'000'000'000});
}

}  // namespace vitpipe
