// The restricted unpickler (pytorch_model.bin's data.pkl): it must refuse, never execute, never overflow.
#include <cstring>
#include <memory>

#include "fuzz_common.h"
#include "io/restricted_unpickler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<char[]> copy(new char[size == 0 ? 1 : size]);
  if (size > 0) std::memcpy(copy.get(), data, size);
  vitpipe::fuzz::expect_parse_or_refusal([&] {
    const vitpipe::PickleResult result =
        vitpipe::restricted_unpickle(std::string_view(copy.get(), size), "fuzz: data.pkl");
    volatile size_t described = result.describe(result.root).size();
    (void)described;
    if (result.consumed > size) std::abort();
  });
  return 0;
}
