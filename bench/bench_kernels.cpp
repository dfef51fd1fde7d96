// Micro-benchmarks of the CPU backend's non-GEMM kernels at ViT-Tiny/16 batch-32 shapes (the shapes of the
// issue's speed target), reporting bytes moved per second so memory-bound kernels can be judged against bandwidth.
#include <benchmark/benchmark.h>

#include "backend/backend.h"
#include "util/random.h"
#include "util/threads.h"

using namespace vitpipe;

namespace {

constexpr int64_t kBatch = 32, kTokens = 197, kHidden = 192, kHeads = 3, kInner = 768;
constexpr int64_t kRows = kBatch * kTokens;

Tensor random_tensor(const Shape& shape, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape);
  Rng rng(7);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(rng.normal());
  return dtype == DType::f32 ? t : t.to(dtype);
}

void set_bytes(benchmark::State& state, double bytes) {
  state.SetBytesProcessed(static_cast<int64_t>(bytes * static_cast<double>(state.iterations())));
}

void BM_LayerNormForward(benchmark::State& state) {
  auto be = make_cpu_backend();
  Tensor x = random_tensor({kRows, kHidden}), w = random_tensor({kHidden}), b = random_tensor({kHidden});
  Tensor y = Tensor::empty({kRows, kHidden}), mean = Tensor::empty({kRows}), rstd = Tensor::empty({kRows});
  for (auto _ : state) be->layernorm_forward(x, w, b, 1e-12, y, mean, rstd);
  set_bytes(state, 2.0 * x.nbytes());
}

void BM_LayerNormBackward(benchmark::State& state) {
  auto be = make_cpu_backend();
  Tensor x = random_tensor({kRows, kHidden}), w = random_tensor({kHidden}), b = random_tensor({kHidden});
  Tensor y = Tensor::empty({kRows, kHidden}), mean = Tensor::empty({kRows}), rstd = Tensor::empty({kRows});
  be->layernorm_forward(x, w, b, 1e-12, y, mean, rstd);
  LayerNormBackwardArgs a;
  a.grad_out = random_tensor({kRows, kHidden});
  a.in = x;
  a.weight = w;
  a.mean = mean;
  a.rstd = rstd;
  a.grad_in = random_tensor({kRows, kHidden});
  a.grad_residual = a.grad_in;
  a.grad_weight = Tensor::zeros({kHidden});
  a.grad_bias = Tensor::zeros({kHidden});
  a.grad_in_colsum = Tensor::zeros({kHidden});
  for (auto _ : state) be->layernorm_backward(a);
  set_bytes(state, 4.0 * x.nbytes());
}

void BM_GeluForward(benchmark::State& state) {
  auto be = make_cpu_backend();
  Tensor x = random_tensor({kRows, kInner}), y = Tensor::empty({kRows, kInner});
  for (auto _ : state) be->gelu_forward(x, y);
  set_bytes(state, 2.0 * x.nbytes());
}

void BM_GeluBackward(benchmark::State& state) {
  auto be = make_cpu_backend();
  Tensor x = random_tensor({kRows, kInner}), g = random_tensor({kRows, kInner}), bias = Tensor::zeros({kInner});
  for (auto _ : state) be->gelu_backward(g, x, g, &bias);
  set_bytes(state, 3.0 * x.nbytes());
}

// Training's fc1 at ViT-Tiny's shape, keeping the pre-activation: fused (range(1) = 1: GELU on each block of rows
// the GEMM just wrote) or as two passes (the GEMM with its bias, then GELU reading the pre-activation back).
void BM_Fc1GeluTraining(benchmark::State& state) {
  auto be = make_cpu_backend();
  const DType type = state.range(0) ? DType::bf16 : DType::f32;
  const bool fused = state.range(1) != 0;
  Tensor in = random_tensor({kRows, kHidden}, type), weight = random_tensor({kInner, kHidden}, type);
  Tensor bias = random_tensor({kInner});
  Tensor pre = Tensor::empty({kRows, kInner}, type), out = Tensor::empty({kRows, kInner}, type);
  for (auto _ : state) {
    if (fused) {
      be->linear_gelu_forward(in, weight, bias, &pre, out);
    } else {
      be->linear_forward(in, weight, &bias, nullptr, pre);
      be->gelu_forward(pre, out);
    }
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * kRows * kHidden * kInner, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void BM_AttentionForward(benchmark::State& state) {
  auto be = make_cpu_backend();
  const DType type = state.range(0) ? DType::bf16 : DType::f32;
  Tensor qkv = random_tensor({kBatch, kTokens, 3 * kHidden}, type);
  Tensor lse = Tensor::empty({kBatch, kHeads, kTokens}), out = Tensor::empty({kRows, kHidden}, type);
  for (auto _ : state) be->attention_forward(qkv, kHeads, lse, out);
  state.counters["GFLOP/s"] =
      benchmark::Counter(4.0 * kBatch * kTokens * kTokens * kHidden, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

void BM_AttentionBackward(benchmark::State& state) {
  auto be = make_cpu_backend();
  const DType type = state.range(0) ? DType::bf16 : DType::f32;
  Tensor qkv = random_tensor({kBatch, kTokens, 3 * kHidden}, type);
  Tensor lse = Tensor::empty({kBatch, kHeads, kTokens}), out = Tensor::empty({kRows, kHidden}, type);
  be->attention_forward(qkv, kHeads, lse, out);
  Tensor grad_out = random_tensor({kRows, kHidden}, type), grad_qkv = Tensor::empty({kBatch, kTokens, 3 * kHidden});
  Tensor bias = Tensor::zeros({3 * kHidden});
  for (auto _ : state) be->attention_backward(grad_out, qkv, out, lse, kHeads, grad_qkv, &bias);
  // The model's FLOPs (four GEMMs); the recomputed scores are a fifth the kernel does on top.
  state.counters["GFLOP/s"] =
      benchmark::Counter(8.0 * kBatch * kTokens * kTokens * kHidden, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

}  // namespace

BENCHMARK(BM_LayerNormForward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LayerNormBackward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GeluForward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GeluBackward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Fc1GeluTraining)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionForward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionBackward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

int main(int argc, char** argv) {
  configure_threads(2);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
}
