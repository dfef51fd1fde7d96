// config.json: parsed into a ViTConfig (validated) and written back as transformers would save it.
#include "fuzz_common.h"
#include "io/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(vitpipe::fuzz::as_text(data, size));
  vitpipe::fuzz::expect_parse_or_refusal([&] {
    const vitpipe::HfConfig parsed = vitpipe::parse_hf_config_text(text, "config.json");
    const std::string written = vitpipe::hf_config_text(parsed.config, parsed.extra);
    // What vitpipe writes, it must read back to the same hyper-parameters.
    const vitpipe::HfConfig again = vitpipe::parse_hf_config_text(written, "written config.json");
    if (again.config.hidden_size != parsed.config.hidden_size ||
        again.config.num_hidden_layers != parsed.config.num_hidden_layers ||
        again.config.labels != parsed.config.labels || again.config.problem_type != parsed.config.problem_type) {
      std::fprintf(stderr, "fuzz: config.json does not survive a write and a read\n");
      std::abort();
    }
  });
  return 0;
}
