// Decode + resize throughput of one chest X-ray (1024x1024 8-bit gray PNG -> 224x224), one thread.
// Target: >= 100 images/s per core, i.e. < 10 ms per image for decode + resize.
//   ./build/bench/bench_image_decode [--benchmark_filter=...]
// The fixture is found through $VITPIPE_SOURCE_DIR, else relative to this source file.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "data/image.h"
#include "data/image_processor.h"
#include "data/pillow_resize.h"

namespace {

namespace fs = std::filesystem;
using namespace vitpipe;

fs::path xray_path() {
  const char* env = std::getenv("VITPIPE_SOURCE_DIR");
  const fs::path root = env != nullptr ? fs::path(env) : fs::path(__FILE__).parent_path().parent_path();
  return root / "tests" / "fixtures" / "images" / "00000013_003.png";
}

std::vector<uint8_t> xray_bytes() {
  std::ifstream in(xray_path(), std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void BM_DecodePngFromMemory(benchmark::State& state) {
  const std::vector<uint8_t> bytes = xray_bytes();
  for (auto _ : state) {
    DecodedImage image = decode_image_memory_keep_gray(bytes.data(), bytes.size(), "xray");
    benchmark::DoNotOptimize(image.pixels.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodePngFromMemory)->Unit(benchmark::kMillisecond);

void BM_ResizeGray1024To224(benchmark::State& state) {
  const DecodedImage image = decode_image_file_keep_gray(xray_path());
  const auto filter = static_cast<ResampleFilter>(state.range(0));
  std::vector<uint8_t> out(224 * 224);
  for (auto _ : state) {
    resize_like_pillow(image.pixels.data(), 1024, 1024, 1, out.data(), 224, 224, filter);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(resample_filter_name(filter));
}
BENCHMARK(BM_ResizeGray1024To224)->Arg(2)->Arg(3)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

void BM_ResizeRgb1024To224(benchmark::State& state) {
  const RgbImage image = decode_image_file(xray_path());
  std::vector<uint8_t> out(224 * 224 * 3);
  for (auto _ : state) {
    resize_like_pillow(image.pixels.data(), 1024, 1024, 3, out.data(), 224, 224, ResampleFilter::bilinear);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ResizeRgb1024To224)->Unit(benchmark::kMillisecond);

// The target: file -> decoded gray -> 224x224 (bilinear), what the data loader does per image.
void BM_DecodeAndResizeFile(benchmark::State& state) {
  const fs::path path = xray_path();
  std::vector<uint8_t> out(224 * 224);
  for (auto _ : state) {
    const DecodedImage image = decode_image_file_keep_gray(path);
    resize_like_pillow(image.pixels.data(), image.width, image.height, image.channels, out.data(), 224, 224,
                       ResampleFilter::bilinear);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeAndResizeFile)->Unit(benchmark::kMillisecond);

// Everything: file -> float32 [3, 224, 224] pixel_values with ViT's config.
void BM_ProcessFileToPixelValues(benchmark::State& state) {
  const fs::path path = xray_path();
  const ImageProcessor processor{PreprocessorConfig{}};
  std::vector<float> out(3 * 224 * 224);
  for (auto _ : state) {
    processor.process_file(path, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ProcessFileToPixelValues)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
