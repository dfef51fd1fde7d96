// preprocessor_config.json: parsed (old and new forms) and written back in the modern form.
#include "fuzz_common.h"
#include "io/preprocessor_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(vitpipe::fuzz::as_text(data, size));
  vitpipe::fuzz::expect_parse_or_refusal([&] {
    const vitpipe::PreprocessorConfig parsed =
        vitpipe::parse_preprocessor_config_text(text, "preprocessor_config.json");
    const vitpipe::PreprocessorConfig again = vitpipe::parse_preprocessor_config_text(
        vitpipe::preprocessor_config_text(parsed), "written preprocessor_config.json");
    if (again.height != parsed.height || again.width != parsed.width || again.resample != parsed.resample ||
        again.do_resize != parsed.do_resize || again.image_mean != parsed.image_mean ||
        again.image_std != parsed.image_std) {
      std::fprintf(stderr, "fuzz: preprocessor_config.json does not survive a write and a read\n");
      std::abort();
    }
  });
  return 0;
}
