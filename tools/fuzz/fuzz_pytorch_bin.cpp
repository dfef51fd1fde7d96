// pytorch_model.bin: the zip reader (libzip) and the legacy format, then the state dict's tensors.
#include "fuzz_common.h"
#include "io/pytorch_bin.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = vitpipe::fuzz::scratch_directory() / "pytorch_model.bin";
  vitpipe::fuzz::write_file(path, vitpipe::fuzz::as_text(data, size));
  vitpipe::fuzz::expect_parse_or_refusal([&] {
    const vitpipe::TensorMap tensors = vitpipe::read_pytorch_bin(path);
    unsigned sum = 0;
    for (const auto& [name, tensor] : tensors) {
      const auto* bytes = static_cast<const uint8_t*>(tensor.raw());
      for (size_t i = 0; i < tensor.nbytes(); ++i) sum += bytes[i];
    }
    volatile unsigned observed = sum;
    (void)observed;
  });
  return 0;
}
