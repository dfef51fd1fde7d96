// The index of a sharded checkpoint (model.safetensors.index.json / pytorch_model.bin.index.json).
#include "fuzz_common.h"
#include "io/weight_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = vitpipe::fuzz::scratch_directory() / "model.safetensors.index.json";
  vitpipe::fuzz::write_file(path, vitpipe::fuzz::as_text(data, size));
  vitpipe::fuzz::expect_parse_or_refusal([&] {
    const vitpipe::WeightIndex index = vitpipe::read_weight_index(path);
    for (const auto& [shard, names] : index.tensors_by_shard) {
      if (!vitpipe::is_plain_file_name(shard)) {
        std::fprintf(stderr, "fuzz: the index accepted a shard that is not a plain file name\n");
        std::abort();
      }
    }
  });
  return 0;
}
