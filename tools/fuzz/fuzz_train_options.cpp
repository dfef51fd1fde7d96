// `vitpipe train --config FILE` in JSON and YAML (the first byte picks), completed and validated as `train` does.
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "train/train_options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto path = vitpipe::fuzz::scratch_directory() / (data[0] % 2 == 0 ? "train.json" : "train.yaml");
  vitpipe::fuzz::write_file(path, vitpipe::fuzz::as_text(data + 1, size - 1));
  vitpipe::fuzz::expect_parse_or_refusal([&] {
    vitpipe::TrainOptions options;
    vitpipe::apply_config_file(options, path);
    vitpipe::complete_defaults(options);
    options.validate();
    // What train_options.json records must read back.
    vitpipe::TrainOptions again;
    vitpipe::apply_config_json(again, options.to_json(), "train_options.json");
  });
  return 0;
}
