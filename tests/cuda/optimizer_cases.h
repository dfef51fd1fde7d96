// Inputs for the optimizer ops' tests across the CUDA boundary and on CudaBackend (test_module_adapter.cpp,
// gpu/test_cuda_backend_gpu.cpp): a range of a few chunks with runs of every kind the contracts allow (an empty run,
// a gap in no run, runs shorter than the 16 lanes, runs over several of the kernels' 1024-element tiles, runs that
// start off a 16-element boundary), per-run decays and steps, work items, and the scalars of each optimizer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/backend.h"

namespace vitpipe::optimizer_cases {

constexpr int64_t kElements = 3 * 8192 + 777;

inline std::vector<OptimizerRun> runs(bool decays) {
  const std::vector<int64_t> cuts = {0, 5, 5, 16, 1000, 3000, 8192, 9001, 16384, 20000, 24576};
  std::vector<OptimizerRun> out;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const float scale = static_cast<float>(k + 1);
    out.push_back({cuts[k], cuts[k + 1], decays && k % 3 != 1 ? 1e-2f * scale : 0.0f, 1e-3f * scale});
  }
  out.push_back({24600, kElements, decays ? 0.05f : 0.0f, 2e-3f});  // [24576, 24600) lies in no run
  return out;
}

// Many short runs (more than one block of the kernels' 16 runs per block; lengths 0 to 250 in turn).
inline std::vector<OptimizerRun> many_runs() {
  std::vector<OptimizerRun> out;
  int64_t at = 0;
  for (int k = 0; at < kElements; ++k) {
    const int64_t end = std::min<int64_t>(kElements, at + (k * 37) % 251);
    out.push_back({at, end, k % 2 == 0 ? 1e-2f : 0.0f, 1e-3f});
    at = end;
  }
  return out;
}

// AdamW's decay is a factor (1 - lr wd), 1 where a parameter does not decay.
inline std::vector<OptimizerRun> adamw_runs() {
  std::vector<OptimizerRun> out = runs(true);
  for (OptimizerRun& r : out) r.decay = 1.0f - r.decay * 1e-2f;
  return out;
}

// Work items: runs grouped by two (the last one alone).
inline std::vector<int64_t> work_items(size_t run_count) {
  std::vector<int64_t> items;
  for (size_t r = 0; r < run_count; r += 2) items.push_back(static_cast<int64_t>(r));
  items.push_back(static_cast<int64_t>(run_count));
  return items;
}

inline OptimizerScalars scalars(int64_t t, bool first_step = false, bool nesterov = false) {
  const double beta1 = 0.9, beta2 = 0.999;
  OptimizerScalars s;
  s.beta1 = static_cast<float>(beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.bias_correction1 = static_cast<float>(1.0 - std::pow(beta1, static_cast<double>(t)));
  s.bias_correction2 = static_cast<float>(1.0 - std::pow(beta2, static_cast<double>(t)));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t))));
  s.eps = 1e-6f;
  s.momentum = 0.9f;
  s.one_minus_dampening = 0.75f;
  s.first_step = first_step;
  s.nesterov = nesterov;
  return s;
}

inline Tensor uniform(int64_t n, std::mt19937& rng, float lo, float hi) {
  Tensor t = Tensor::empty({n});
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < n; ++i) t.f32()[i] = d(rng);
  return t;
}

// p, g, m, v (v >= 0) of kElements each.
inline std::vector<Tensor> state(uint32_t seed) {
  std::mt19937 rng(seed);
  return {uniform(kElements, rng, -1, 1), uniform(kElements, rng, -0.1f, 0.1f), uniform(kElements, rng, -0.01f, 0.01f),
          uniform(kElements, rng, 0.0f, 1e-4f)};
}

inline OptimizerStep step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                          const std::vector<OptimizerRun>& runs, const std::vector<int64_t>& items) {
  OptimizerStep s;
  s.params = p;
  s.grads = g;
  s.exp_avg = m;
  s.exp_avg_sq = v;
  s.runs = runs;
  s.work_items = items;
  return s;
}

// sum_of_squares' bounds over n elements: the 8192-element chunks, cut once more off the 16-lane grid.
inline std::vector<int64_t> bounds(int64_t n) {
  std::vector<int64_t> out = {0};
  for (int64_t b = 8192; b < n; b += 8192) {
    out.push_back(b - 8192 + 4099);
    out.push_back(b);
  }
  out.push_back(n);
  return out;
}

}  // namespace vitpipe::optimizer_cases
