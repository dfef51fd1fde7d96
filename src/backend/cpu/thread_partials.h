// Per-thread partial sums (column sums, LayerNorm weight gradients) reduced at the end of a kernel. Each thread's
// row starts on its own cache line, so threads never write the same line (no false sharing).
#pragma once

#include <omp.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace vitpipe::cpu {

// Below this many elements of work a kernel runs on the calling thread: waking a team costs more than it saves, and
// on a busy machine a team whose other threads are descheduled spins at the barrier.
constexpr int64_t kMinParallelWork = int64_t{1} << 15;
inline bool parallel_worth_it(int64_t work) { return work >= kMinParallelWork; }

class ThreadPartials {
 public:
  // Zeroes `threads` rows of `width` floats, reusing memory across calls (no allocation in a steady state).
  void reset(int threads, int64_t width) {
    threads_ = threads;
    stride_ = (width + 15) / 16 * 16;
    size_t need = static_cast<size_t>(threads) * static_cast<size_t>(stride_);
    if (storage_.size() < need + 16) storage_.resize(need + 16);
    std::memset(row(0), 0, need * sizeof(float));
  }
  float* row(int thread) {
    auto base = reinterpret_cast<uintptr_t>(storage_.data());
    float* aligned = reinterpret_cast<float*>((base + 63) / 64 * 64);
    return aligned + static_cast<int64_t>(thread) * stride_;
  }
  // dst[j] += sum over threads of row(t)[j]
  void add_into(float* dst, int64_t width) {
    for (int t = 0; t < threads_; ++t) {
      const float* r = row(t);
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) dst[j] += r[j];
    }
  }

 private:
  std::vector<float> storage_;
  int threads_ = 0;
  int64_t stride_ = 0;
};

}  // namespace vitpipe::cpu
