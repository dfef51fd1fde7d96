// safetensors reader: any bytes either parse (every tensor's bytes then lie inside the input) or are refused.
#include <cstring>
#include <memory>

#include "fuzz_common.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exactly-sized private copy so AddressSanitizer catches any read past the end.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size == 0 ? 1 : size]);
  if (size > 0) std::memcpy(copy.get(), data, size);
  vitpipe::fuzz::expect_parse_or_refusal([&] {
    vitpipe::SafetensorsFile file = vitpipe::read_safetensors_memory(copy.get(), size, "fuzz.safetensors");
    unsigned sum = 0;
    for (const auto& [name, tensor] : file.tensors) {
      const auto* bytes = static_cast<const uint8_t*>(tensor.raw());
      for (size_t i = 0; i < tensor.nbytes(); ++i) sum += bytes[i];
    }
    volatile unsigned observed = sum;
    (void)observed;
  });
  return 0;
}
