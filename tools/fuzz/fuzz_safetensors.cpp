// libFuzzer target for the safetensors reader: any bytes must either parse or throw vitpipe::Error, never crash,
// read out of bounds or throw anything else. Build and run with tools/fuzz/run_fuzz_safetensors.sh (clang,
// -fsanitize=fuzzer,address,undefined). The mutation loop in tests/io/test_safetensors.cpp covers the same ground
// in the normal test suite.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "io/safetensors.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exactly-sized private copy so AddressSanitizer catches any read past the end.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size == 0 ? 1 : size]);
  if (size > 0) std::memcpy(copy.get(), data, size);
  try {
    vitpipe::SafetensorsFile file = vitpipe::read_safetensors_memory(copy.get(), size, "fuzz");
    unsigned sum = 0;
    for (const auto& [name, tensor] : file.tensors) {
      const auto* bytes = static_cast<const uint8_t*>(tensor.raw());
      for (size_t i = 0; i < tensor.nbytes(); ++i) sum += bytes[i];
    }
    volatile unsigned observed = sum;
    (void)observed;
  } catch (const vitpipe::Error&) {
    // refused: fine
  } catch (...) {
    std::abort();  // anything else is a bug
  }
  return 0;
}
