#include "backend/cpu/memory_bandwidth.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace vitpipe::cpu {

double measure_memory_bandwidth_bytes_per_s(int threads) {
  // 2 x 64 MiB: past any L3 these machines have, so the passes stream from and to memory.
  const int64_t n = int64_t{16} << 20;
  std::vector<float> src(static_cast<size_t>(n)), dst(static_cast<size_t>(n));
  float* s = src.data();
  float* d = dst.data();
  double best = 0.0;
  for (int pass = 0; pass < 6; ++pass) {  // the first pass also faults the pages in
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel for simd schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) d[i] = 0.5f * s[i] + 1.0f;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (pass > 0) best = std::max(best, 2.0 * static_cast<double>(n) * sizeof(float) / seconds);
  }
  return best;
}

}  // namespace vitpipe::cpu
