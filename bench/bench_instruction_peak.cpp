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
// clang-format off
#define VITPIPE_TWELVE_CHAINS(OP, ARG) \
  OP(a0, ARG); OP(a1, ARG); OP(a2, ARG); OP(a3, ARG); OP(a4, ARG); OP(a5, ARG); \
  OP(a6, ARG); OP(a7, ARG); OP(a8, ARG); OP(a9, ARG); OP(a10, ARG); OP(a11, ARG)
#define VITPIPE_SIXTEEN_CHAINS(OP, ARG) \
  VITPIPE_TWELVE_CHAINS(OP, ARG); OP(a12, ARG); OP(a13, ARG); OP(a14, ARG); OP(a15, ARG)
// clang-format on
#define VITPIPE_CHAIN_START(a, SIMD) \
  auto a = SIMD##_set1_ps(start++);  \
  __asm__("" : "+v"(a))
#define VITPIPE_CHAIN_STEP(a, MULTIPLY_ADD) a = MULTIPLY_ADD(a, x, y)
#define VITPIPE_CHAIN_SUM(a, SIMD) s = SIMD##_add_ps(s, a)

// float NAME(long n): CHAINS accumulators of SIMD (_mm256, _mm512) floats, each n times a = MULTIPLY_ADD(a, x, y).
#define VITPIPE_CHAIN_FUNCTION(NAME, TARGET, CHAINS, SIMD, OPERAND, X, Y, MULTIPLY_ADD) \
  __attribute__((target(TARGET), noinline)) float NAME(long n) {                        \
    float start = 0.0f;                                                                 \
    CHAINS(VITPIPE_CHAIN_START, SIMD);                                                  \
    OPERAND x = X, y = Y;                                                               \
    __asm__("" : "+v"(x), "+v"(y));                                                     \
    for (long i = 0; i < n; ++i) {                                                      \
      CHAINS(VITPIPE_CHAIN_STEP, MULTIPLY_ADD);                                         \
    }                                                                                   \
    auto s = SIMD##_setzero_ps();                                                       \
    CHAINS(VITPIPE_CHAIN_SUM, SIMD);                                                    \
    return SIMD##_cvtss_f32(s); /* one lane keeps every chain live */                   \
  }

constexpr int kYmmChains = 12, kZmmChains = 16;

#define VITPIPE_FMA_YMM(a, x, y) _mm256_fmadd_ps(x, y, a)
#define VITPIPE_FMA_ZMM(a, x, y) _mm512_fmadd_ps(x, y, a)
VITPIPE_CHAIN_FUNCTION(fma_ymm_chains, "avx2,fma", VITPIPE_TWELVE_CHAINS, _mm256, __m256, _mm256_set1_ps(1.0f),
                       _mm256_set1_ps(1e-7f), VITPIPE_FMA_YMM)
VITPIPE_CHAIN_FUNCTION(fma_zmm_chains, "avx512f", VITPIPE_SIXTEEN_CHAINS, _mm512, __m512, _mm512_set1_ps(1.0f),
                       _mm512_set1_ps(1e-7f), VITPIPE_FMA_ZMM)
// VDPBF16PS: 16 lanes, each two bf16 products added into f32; the operands are bf16 pairs (1, 1) and (1e-7, 1e-7).
VITPIPE_CHAIN_FUNCTION(bf16_dot_zmm_chains, "avx512f,avx512bf16", VITPIPE_SIXTEEN_CHAINS, _mm512, __m512bh,
                       (__m512bh)_mm512_set1_epi32(0x3f803f80), (__m512bh)_mm512_set1_epi32(0x33d633d6),
                       _mm512_dpbf16_ps)

#undef VITPIPE_FMA_ZMM
#undef VITPIPE_FMA_YMM
#undef VITPIPE_CHAIN_FUNCTION
#undef VITPIPE_CHAIN_SUM
#undef VITPIPE_CHAIN_STEP
#undef VITPIPE_CHAIN_START
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
