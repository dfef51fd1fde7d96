// The cores' own arithmetic peak: one multiply-add instruction per accumulator, twelve independent accumulators held
// in registers, no loads, on every core at once. It is the ceiling the measured GEMM peak (`vitpipe bench`, oneDNN at
// 2048^3) is judged against: a speed target that needs more than this is out of reach on this CPU, whatever the code.
//
// The accumulators start at different values: with equal ones, GCC merged the twelve chains into one (all identical),
// which then "ran" at twelve times the real rate.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <thread>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "util/threads.h"

using namespace vitpipe;

namespace {

constexpr long kIterations = 20'000'000;  // per thread and benchmark iteration: about 0.1 s

#define VITPIPE_TWELVE(OP) \
  OP(a0);                  \
  OP(a1);                  \
  OP(a2);                  \
  OP(a3);                  \
  OP(a4);                  \
  OP(a5);                  \
  OP(a6);                  \
  OP(a7);                  \
  OP(a8);                  \
  OP(a9);                  \
  OP(a10);                 \
  OP(a11)

__attribute__((target("avx2,fma"), noinline)) float fma_ymm_chains(long n) {
  __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2), a3 = _mm256_set1_ps(3);
  __m256 a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5), a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7);
  __m256 a8 = _mm256_set1_ps(8), a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
  __m256 x = _mm256_set1_ps(1.0f), y = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < n; ++i) {
#define STEP(a) a = _mm256_fmadd_ps(x, y, a)
    VITPIPE_TWELVE(STEP);
#undef STEP
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  return _mm256_cvtss_f32(s);  // one lane keeps every chain live
}

__attribute__((target("avx512f"), noinline)) float fma_zmm_chains(long n) {
  __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2), a3 = _mm512_set1_ps(3);
  __m512 a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5), a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7);
  __m512 a8 = _mm512_set1_ps(8), a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
  __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < n; ++i) {
#define STEP(a) a = _mm512_fmadd_ps(x, y, a)
    VITPIPE_TWELVE(STEP);
#undef STEP
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  return _mm512_cvtss_f32(s);  // one lane keeps every chain live
}

// VDPBF16PS: 16 lanes, each two bf16 products added into f32.
__attribute__((target("avx512f,avx512bf16"), noinline)) float bf16_dot_zmm_chains(long n) {
  __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2), a3 = _mm512_set1_ps(3);
  __m512 a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5), a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7);
  __m512 a8 = _mm512_set1_ps(8), a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // bf16 pairs (1, 1)
  const __m512bh y = (__m512bh)_mm512_set1_epi32(0x33d633d6);  // bf16 pairs (1e-7, 1e-7)
  for (long i = 0; i < n; ++i) {
#define STEP(a) a = _mm512_dpbf16_ps(a, x, y)
    VITPIPE_TWELVE(STEP);
#undef STEP
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  return _mm512_cvtss_f32(s);  // one lane keeps every chain live
}

#undef VITPIPE_TWELVE

// Runs `chains` on `threads` threads at once (the threads vitpipe's kernels use) and reports FLOP/s for all of them.
void run_on_every_core(benchmark::State& state, bool supported, float (*chains)(long), double flops_per_step) {
  if (!supported) {
    state.SkipWithError("this CPU does not have the instruction");
    return;
  }
  const int threads = available_cores();
  std::vector<float> sums(static_cast<size_t>(threads));
  for (auto _ : state) {
    std::vector<std::thread> team;
    for (int t = 0; t < threads; ++t) team.emplace_back([&, t] { sums[t] = chains(kIterations); });
    for (auto& thread : team) thread.join();
    benchmark::DoNotOptimize(sums.data());
  }
  const double flops = flops_per_step * 12.0 * static_cast<double>(kIterations) * threads;
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}

void BM_Fp32FmaYmm(benchmark::State& state) {
  const auto& f = cpu::cpu_features();
  run_on_every_core(state, f.avx2 && f.fma && f.os_avx, fma_ymm_chains, 2.0 * 8);
}
void BM_Fp32FmaZmm(benchmark::State& state) {
  const auto& f = cpu::cpu_features();
  run_on_every_core(state, f.avx512f && f.os_avx512, fma_zmm_chains, 2.0 * 16);
}
void BM_Bf16DotZmm(benchmark::State& state) {
  const auto& f = cpu::cpu_features();
  run_on_every_core(state, f.avx512_bf16 && f.os_avx512, bf16_dot_zmm_chains, 2.0 * 32);
}

}  // namespace

BENCHMARK(BM_Fp32FmaYmm)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Fp32FmaZmm)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Bf16DotZmm)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
