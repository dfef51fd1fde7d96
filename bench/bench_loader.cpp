// Input pipeline throughput (a benchmark, not a test: run it by hand on a quiet machine).
//   1. decode + Pillow resize of the bundled 1024x1024 ChestX-ray14 originals to 224, one thread: images/s per core
//   2. the loader from a packed cache at 224 with augmentation on N threads (default 2): images/s delivered
// Usage: bench_loader [--threads N] [--batch B] [--seconds S] [--size S]
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "data/data_spec.h"
#include "data/file_dataset.h"
#include "data/image.h"
#include "data/loader.h"
#include "data/packed_cache.h"
#include "data/pillow_resize.h"
#include "util/log.h"

namespace fs = std::filesystem;
using namespace vitpipe;

// CPU seconds this process has used (all threads): on a shared machine, wall time alone says little.
static double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

static double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int main(int argc, char** argv) {
  int threads = 2;
  int64_t batch_size = 64;
  double seconds = 3.0;
  int64_t size = 224;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--threads") threads = std::atoi(argv[i + 1]);
    if (flag == "--batch") batch_size = std::atoll(argv[i + 1]);
    if (flag == "--seconds") seconds = std::atof(argv[i + 1]);
    if (flag == "--size") size = std::atoll(argv[i + 1]);
  }
  const fs::path sample = fs::path(VITPIPE_SOURCE_DIR) / "data" / "chestxray14-sample";
  try {
    // 1. decode + resize, one thread.
    std::vector<fs::path> originals;
    for (const auto& e : fs::directory_iterator(sample / "full-size")) originals.push_back(e.path());
    int64_t decoded = 0;
    auto start = std::chrono::steady_clock::now();
    std::vector<uint8_t> out(static_cast<size_t>(size * size * 3));
    while (seconds_since(start) < seconds) {
      DecodedImage image = decode_image_file_keep_gray(originals[static_cast<size_t>(decoded) % originals.size()]);
      resize_like_pillow(image.pixels.data(), image.width, image.height, image.channels, out.data(), size, size,
                         ResampleFilter::bilinear);
      ++decoded;
    }
    const double decode_rate = static_cast<double>(decoded) / seconds_since(start);
    std::printf("decode+resize 1024x1024 PNG -> %lld: %.1f images/s per core (target >= 100)\n",
                static_cast<long long>(size), decode_rate);

    // 2. loader from a cache.
    const fs::path dir = fs::temp_directory_path() / ("vitpipe-bench-cache-" + std::to_string(::getpid()));
    set_log_enabled(false);
    auto source = open_chestxray14_dataset(sample, DatasetOptions{});
    PrepareCacheOptions prepare;
    prepare.image_size = size;
    prepare.progress = false;
    prepare_packed_cache(*source, dir, prepare);
    auto cache = open_dataset("cache:" + dir.string(), DatasetOptions{});
    set_log_enabled(true);
    std::vector<int64_t> items(static_cast<size_t>(cache->size()));
    for (size_t i = 0; i < items.size(); ++i) items[i] = static_cast<int64_t>(i);
    PreprocessorConfig config;
    config.height = config.width = size;
    LoaderOptions options = training_loader_options(batch_size, 1234);
    options.threads = threads;
    Loader loader(cache, items, config, options);
    int64_t images = 0;
    int64_t epoch = 0;
    double checksum = 0;
    start = std::chrono::steady_clock::now();
    const double cpu_start = process_cpu_seconds();
    while (seconds_since(start) < seconds) {
      loader.start_epoch(epoch++);
      Batch batch;
      while (loader.next(&batch)) {
        images += batch.size();
        checksum += batch.images.f32()[0];
      }
    }
    const double wall = seconds_since(start);
    const double cpu = process_cpu_seconds() - cpu_start;
    const double loader_rate = static_cast<double>(images) / wall;
    std::printf(
        "loader from cache at %lld, augmentation on, %d threads, batch %lld: %.0f images/s wall-clock "
        "(target >= 20000)\n",
        static_cast<long long>(size), threads, static_cast<long long>(batch_size), loader_rate);
    std::printf(
        "  used %.2f CPU-s in %.2f s (%.0f%% of %d cores): %.0f images per CPU-second, so %.0f images/s on %d "
        "otherwise idle cores  [checksum %.3f]\n",
        cpu, wall, 100.0 * cpu / (wall * threads), threads, static_cast<double>(images) / cpu,
        static_cast<double>(images) / cpu * threads, threads, checksum);
    fs::remove_all(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
