#include "backend/cpu/gemm_peak.h"

#include <algorithm>
#include <chrono>

#include "backend/cpu/onednn_matmul.h"
#include "tensor/tensor.h"

namespace vitpipe::cpu {

double measure_gemm_peak_gflops(DType dtype) {
  const int64_t n = 2048;
  Tensor a = Tensor::zeros({n, n}, dtype), b = Tensor::zeros({n, n}, dtype), c = Tensor::zeros({n, n});
  MatmulShape s;
  s.m = s.n = s.k = n;
  s.a_row = n, s.b_row = n, s.c_row = n;
  s.a_type = s.b_type = dtype;
  MatmulCache cache;
  cache.run(s, a.raw(), b.raw(), c.raw());  // JIT and first touch
  double best = 0.0;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    cache.run(s, a.raw(), b.raw(), c.raw());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * static_cast<double>(n * n * n) / seconds / 1e9);
  }
  return best;
}

}  // namespace vitpipe::cpu
