// Images through vitpipe's decode path: signature sniffing, libspng / libjpeg-turbo with vitpipe's limits, the
// conversion to what Pillow's convert("RGB") gives, then Pillow's resize as the loader and `data prepare` do.
// Built three times, as fuzz_png, fuzz_jpeg and fuzz_dicom: the same path, each run on its own format's corpus and
// time budget.
#include <cstdlib>
#include <cstring>
#include <memory>

#include "data/image.h"
#include "data/pillow_resize.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Keep each decode small and fast; the limit itself is part of what is fuzzed.
  setenv("VITPIPE_MAX_IMAGE_PIXELS", "4194304", 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size == 0 ? 1 : size]);
  if (size > 0) std::memcpy(copy.get(), data, size);
  vitpipe::fuzz::expect_parse_or_refusal([&] {
    vitpipe::DecodedImage image = vitpipe::decode_image_memory_keep_gray(copy.get(), size, VITPIPE_FUZZ_IMAGE_NAME);
    if (image.pixels.size() != static_cast<size_t>(image.width * image.height * image.channels)) std::abort();
    std::vector<uint8_t> resized(7 * 5 * static_cast<size_t>(image.channels));
    vitpipe::resize_like_pillow(image.pixels.data(), image.width, image.height, image.channels, resized.data(), 7, 5,
                                vitpipe::ResampleFilter::bilinear);
    const vitpipe::RgbImage rgb = vitpipe::to_rgb(std::move(image));
    if (rgb.pixels.size() != static_cast<size_t>(rgb.width * rgb.height * 3)) std::abort();
  });
  return 0;
}
