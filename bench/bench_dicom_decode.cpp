// Decode + 8-bit mapping + Pillow-exact resize to 224x224 of every image file in $VITPIPE_BENCH_IMAGES (DICOM, 16-bit
// or 8-bit PNG, JPEG), one thread: what the data loader does per image. bench/dicom_vs_pillow.py writes the files
// (2500x2000 12-bit DICOM, uncompressed and JPEG-lossless, and the same image as an 8-bit PNG) and runs this beside
// Pillow in the same run.
//   VITPIPE_BENCH_IMAGES=DIR ./build/bench/bench_dicom_decode [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "data/image.h"
#include "data/pillow_resize.h"

namespace {

namespace fs = std::filesystem;
using namespace vitpipe;

void decode_and_resize(benchmark::State& state, const fs::path& path) {
  std::vector<uint8_t> out(224 * 224 * 3);
  for (auto _ : state) {
    const DecodedImage image = decode_image_file_keep_gray(path);
    resize_like_pillow(image.pixels.data(), image.width, image.height, image.channels, out.data(), 224, 224,
                       ResampleFilter::bilinear);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

int main(int argc, char** argv) {
  const char* dir = std::getenv("VITPIPE_BENCH_IMAGES");
  if (dir == nullptr || !fs::is_directory(dir)) {
    std::fprintf(stderr, "set VITPIPE_BENCH_IMAGES to a folder of images (bench/dicom_vs_pillow.py makes one)\n");
    return 2;
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const auto& file : files)
    benchmark::RegisterBenchmark(("DecodeAndResize/" + file.filename().string()).c_str(), [file](
                                                                                              benchmark::State& state) {
      decode_and_resize(state, file);
    })->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
