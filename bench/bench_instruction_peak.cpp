// The cores' own arithmetic peak: one multiply-add instruction per accumulator, independent accumulators held in
// registers, no loads, on every thread at once. It is
// the ceiling the measured GEMM peak (`vitpipe bench`, oneDNN at 2048^3) is judged against: a speed target that needs
// more than this is out of reach on this CPU, whatever the code.
//
// Each accumulator starts at its own value, hidden from the optimiser: with equal ones, GCC merged twelve chains into
// one (all identical), which then "ran" at twelve times the real rate. The multiplicands are hidden too: LLVM turns a
// product by 1.0 into an add.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "util/threads.h"

using namespace vitpipe;

namespace {

constexpr long kIterations = 15'000'000;  // per thread and benchmark iteration: 25-70 ms on Zen 5

// Twelve chains for 256-bit registers (AVX2 has 16: twelve sums and two multiplicands fit), sixteen for 512-bit ones
// (32 registers); both exceed latency x throughput on the CPUs seen so far.
#define VITPIPE_TWELVE_CHAINS(OP) \
  OP(a0);                         \
  OP(a1);                         \
  OP(a2);                         \
  OP(a3);                         \
  OP(a4);                         \
  OP(a5);                         \
  OP(a6);                         \
  OP(a7);                         \
  OP(a8);                         \
  OP(a9);                         \
  OP(a10);                        \
  OP(a11)
#define VITPIPE_SIXTEEN_CHAINS(OP) \
  VITPIPE_TWELVE_CHAINS(OP);       \
  OP(a12);                         \
  OP(a13);                         \
  OP(a14);                         \
  OP(a15)

constexpr int kYmmChains = 12, kZmmChains = 16;

__attribute__((target("avx2,fma"), noinline)) float fma_ymm_chains(long n) {
  float start = 0.0f;
#define START(a)                      \
  __m256 a = _mm256_set1_ps(start++); \
  __asm__("" : "+v"(a))
  VITPIPE_TWELVE_CHAINS(START);
#undef START
  __m256 x = _mm256_set1_ps(1.0f), y = _mm256_set1_ps(1e-7f);
  __asm__("" : "+v"(x), "+v"(y));
  for (long i = 0; i < n; ++i) {
#define STEP(a) a = _mm256_fmadd_ps(x, y, a)
    VITPIPE_TWELVE_CHAINS(STEP);
#undef STEP
  }
  __m256 s = _mm256_setzero_ps();
#define SUM(a) s = _mm256_add_ps(s, a)
  VITPIPE_TWELVE_CHAINS(SUM);
#undef SUM
  return _mm256_cvtss_f32(s);  // one lane keeps every chain live
}

__attribute__((target("avx512f"), noinline)) float fma_zmm_chains(long n) {
  float start = 0.0f;
#define START(a)                      \
  __m512 a = _mm512_set1_ps(start++); \
  __asm__("" : "+v"(a))
  VITPIPE_SIXTEEN_CHAINS(START);
#undef START
  __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(1e-7f);
  __asm__("" : "+v"(x), "+v"(y));
  for (long i = 0; i < n; ++i) {
#define STEP(a) a = _mm512_fmadd_ps(x, y, a)
    VITPIPE_SIXTEEN_CHAINS(STEP);
#undef STEP
  }
  __m512 s = _mm512_setzero_ps();
#define SUM(a) s = _mm512_add_ps(s, a)
  VITPIPE_SIXTEEN_CHAINS(SUM);
#undef SUM
  return _mm512_cvtss_f32(s);
}

// VDPBF16PS: 16 lanes, each two bf16 products added into f32.
__attribute__((target("avx512f,avx512bf16"), noinline)) float bf16_dot_zmm_chains(long n) {
  float start = 0.0f;
#define START(a)                      \
  __m512 a = _mm512_set1_ps(start++); \
  __asm__("" : "+v"(a))
  VITPIPE_SIXTEEN_CHAINS(START);
#undef START
  __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // bf16 pairs (1, 1)
  __m512bh y = (__m512bh)_mm512_set1_epi32(0x33d633d6);  // bf16 pairs (1e-7, 1e-7)
  __asm__("" : "+v"(x), "+v"(y));
  for (long i = 0; i < n; ++i) {
#define STEP(a) a = _mm512_dpbf16_ps(a, x, y)
    VITPIPE_SIXTEEN_CHAINS(STEP);
#undef STEP
  }
  __m512 s = _mm512_setzero_ps();
#define SUM(a) s = _mm512_add_ps(s, a)
  VITPIPE_SIXTEEN_CHAINS(SUM);
#undef SUM
  return _mm512_cvtss_f32(s);
}

#undef VITPIPE_SIXTEEN_CHAINS
#undef VITPIPE_TWELVE_CHAINS

// OMP_NUM_THREADS when set (what vitpipe's kernels would use), else every core this process may run on.
int thread_count() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  const int requested = env ? std::atoi(env) : 0;
  return requested > 0 ? requested : available_cores();
}

// Runs `chains` on thread_count() threads at once and reports FLOP/s for all of them.
void run_on_every_core(benchmark::State& state, bool supported, float (*chains)(long), double flops_per_instruction,
                       int chain_count) {
  if (!supported) {
    state.SkipWithError("this CPU does not have the instruction");
    return;
  }
  const int threads = thread_count();
  std::vector<float> sums(static_cast<size_t>(threads));
  for (auto _ : state) {
    std::vector<std::thread> team;
    for (int t = 0; t < threads; ++t) team.emplace_back([&, t] { sums[t] = chains(kIterations); });
    for (auto& thread : team) thread.join();
    benchmark::DoNotOptimize(sums.data());
  }
  const double flops = flops_per_instruction * chain_count * static_cast<double>(kIterations) * threads;
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["cpu_threads"] = threads;  // not "threads": Google Benchmark's JSON has its own
}

void BM_Fp32FmaYmm(benchmark::State& state) {
  const auto& f = cpu::cpu_features();
  run_on_every_core(state, f.avx2 && f.fma && f.os_avx, fma_ymm_chains, 2.0 * 8, kYmmChains);
}
void BM_Fp32FmaZmm(benchmark::State& state) {
  const auto& f = cpu::cpu_features();
  run_on_every_core(state, f.avx512f && f.os_avx512, fma_zmm_chains, 2.0 * 16, kZmmChains);
}
void BM_Bf16DotZmm(benchmark::State& state) {
  const auto& f = cpu::cpu_features();
  run_on_every_core(state, f.avx512_bf16 && f.os_avx512, bf16_dot_zmm_chains, 2.0 * 32, kZmmChains);
}

}  // namespace

BENCHMARK(BM_Fp32FmaYmm)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Fp32FmaZmm)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Bf16DotZmm)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
