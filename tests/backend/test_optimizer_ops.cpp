// The Backend's optimizer, gradient-norm, zeroing and host-copy ops against their contracts in backend.h (the ones a
// CUDA backend implements next): per-element formulas, elements outside every run untouched, the fixed-lane sums,
// determinism, and the same bits through ProfilingBackend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/profiling_backend.h"
#include "util/error.h"

using namespace vitpipe;

namespace {

constexpr int64_t kN = 1000;

Tensor random_tensor(int64_t n, std::mt19937& rng, float lo, float hi) {
  Tensor t = Tensor::empty({n});
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < n; ++i) t.f32()[i] = d(rng);
  return t;
}

// Runs with a gap ([300, 310) is in no run) and a run boundary inside a chunk, plus two work items.
std::vector<OptimizerRun> test_runs() {
  return {{0, 100, 0.0f, 0.0f}, {100, 300, 0.0f, 0.0f}, {310, 777, 0.0f, 0.0f}, {777, kN, 0.0f, 0.0f}};
}
const std::vector<int64_t> kItems = {0, 2, 4};

struct State {
  Tensor p, g, m, v;
  State clone() const { return {p.clone(), g.clone(), m.clone(), v.clone()}; }
};

State random_state(uint32_t seed) {
  std::mt19937 rng(seed);
  return {random_tensor(kN, rng, -1, 1), random_tensor(kN, rng, -0.1f, 0.1f), random_tensor(kN, rng, -0.01f, 0.01f),
          random_tensor(kN, rng, 0.0f, 1e-4f)};
}

OptimizerStep step_of(const State& s, const std::vector<OptimizerRun>& runs, bool moments = true) {
  OptimizerStep step;
  step.params = s.p;
  step.grads = s.g;
  if (moments) {
    step.exp_avg = s.m;
    step.exp_avg_sq = s.v;
  }
  step.runs = runs;
  step.work_items = kItems;
  return step;
}

bool same_bits(const Tensor& a, const Tensor& b) { return std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0; }

void expect_close(float got, float want, const char* what, int64_t i) {
  EXPECT_NEAR(got, want, 1e-6f * std::max(1.0f, std::fabs(want))) << what << " at " << i;
}

OptimizerScalars adam_scalars() {
  OptimizerScalars s;
  s.beta1 = 0.9f;
  s.one_minus_beta1 = 0.1f;
  s.beta2 = 0.999f;
  s.one_minus_beta2 = 0.001f;
  s.bias_correction1 = 0.19f;
  s.bias_correction2 = 0.001999f;
  s.bias_correction2_sqrt = std::sqrt(0.001999f);
  s.eps = 1e-8f;
  return s;
}

}  // namespace

TEST(BackendOptimizerOps, AdamWFollowsItsContractAndLeavesGapsAlone) {
  auto cpu = make_cpu_backend();
  ProfilingBackend profiled(*cpu);
  std::vector<OptimizerRun> runs = test_runs();
  for (size_t r = 0; r < runs.size(); ++r) {
    runs[r].decay = r % 2 ? 1.0f : 0.99f;
    runs[r].step = 1e-3f * static_cast<float>(r + 1);
  }
  const OptimizerScalars s = adam_scalars();
  const State before = random_state(1), a = before.clone(), b = before.clone();
  cpu->adamw_update(step_of(a, runs), s);
  profiled.adamw_update(step_of(b, runs), s);
  EXPECT_TRUE(same_bits(a.p, b.p) && same_bits(a.m, b.m) && same_bits(a.v, b.v));
  EXPECT_TRUE(same_bits(a.g, before.g));
  for (const OptimizerRun& r : runs) {
    for (int64_t i = r.begin; i < r.end; ++i) {
      const float g = before.g.f32()[i];
      const float m = s.beta1 * before.m.f32()[i] + g * s.one_minus_beta1;
      const float v = s.beta2 * before.v.f32()[i] + s.one_minus_beta2 * g * g;
      const float p = before.p.f32()[i] * r.decay - r.step * (m / (std::sqrt(v) / s.bias_correction2_sqrt + s.eps));
      expect_close(a.m.f32()[i], m, "m", i);
      expect_close(a.v.f32()[i], v, "v", i);
      expect_close(a.p.f32()[i], p, "p", i);
    }
  }
  for (int64_t i = 300; i < 310; ++i) {
    EXPECT_EQ(a.p.f32()[i], before.p.f32()[i]);
    EXPECT_EQ(a.m.f32()[i], before.m.f32()[i]);
  }
  EXPECT_EQ(profiled.operations().at("adamw update").calls, 1);
}

TEST(BackendOptimizerOps, LambReturnsPerRunSquaresAndAppliesItsSteps) {
  auto cpu = make_cpu_backend();
  std::vector<OptimizerRun> runs = test_runs();
  for (size_t r = 0; r < runs.size(); ++r) runs[r].decay = r % 2 ? 0.0f : 0.05f;
  const OptimizerScalars s = adam_scalars();
  const State before = random_state(2), a = before.clone();
  std::vector<double> squares(2 * runs.size(), -1.0);
  cpu->lamb_moments(step_of(a, runs), s, squares);
  EXPECT_TRUE(same_bits(a.p, before.p));  // pass 1 only reads p
  std::vector<float> u(kN);
  for (size_t r = 0; r < runs.size(); ++r) {
    double p2 = 0, u2 = 0;
    for (int64_t i = runs[r].begin; i < runs[r].end; ++i) {
      const float m = a.m.f32()[i], v = a.v.f32()[i], p = a.p.f32()[i];
      u[i] = (m / s.bias_correction1) / (std::sqrt(v / s.bias_correction2) + s.eps) + runs[r].decay * p;
      p2 += static_cast<double>(p) * p;
      u2 += static_cast<double>(u[i]) * u[i];
    }
    EXPECT_NEAR(squares[2 * r], p2, 1e-9 * p2);
    EXPECT_NEAR(squares[2 * r + 1], u2, 1e-5 * u2);
    runs[r].step = 1e-3f / static_cast<float>(r + 1);
  }
  // Deterministic: the same inputs give the same bits.
  const State again = before.clone();
  std::vector<double> squares_again(squares.size());
  cpu->lamb_moments(step_of(again, runs), s, squares_again);
  EXPECT_EQ(std::memcmp(squares.data(), squares_again.data(), squares.size() * sizeof(double)), 0);

  const Tensor p_before = a.p.clone();
  cpu->lamb_update(step_of(a, runs), s);
  for (const OptimizerRun& r : runs) {
    for (int64_t i = r.begin; i < r.end; ++i) expect_close(a.p.f32()[i], p_before.f32()[i] - r.step * u[i], "p", i);
  }
  for (int64_t i = 300; i < 310; ++i) EXPECT_EQ(a.p.f32()[i], before.p.f32()[i]);
}

TEST(BackendOptimizerOps, SgdWithAndWithoutMomentum) {
  auto cpu = make_cpu_backend();
  std::vector<OptimizerRun> runs = test_runs();
  for (size_t r = 0; r < runs.size(); ++r) {
    runs[r].decay = r % 2 ? 0.0f : 1e-2f;
    runs[r].step = 0.1f;
  }
  for (bool first : {true, false}) {
    for (bool nesterov : {false, true}) {
      OptimizerScalars s;
      s.momentum = 0.9f;
      s.one_minus_dampening = 1.0f;
      s.first_step = first;
      s.nesterov = nesterov;
      const State before = random_state(3), a = before.clone();
      OptimizerStep step = step_of(a, runs, false);
      step.exp_avg = a.m;
      cpu->sgd_update(step, s);
      for (const OptimizerRun& r : runs) {
        for (int64_t i = r.begin; i < r.end; ++i) {
          const float p0 = before.p.f32()[i], g = before.g.f32()[i];
          const float d = r.decay != 0.0f ? g + r.decay * p0 : g;
          const float b = first ? d : before.m.f32()[i] * s.momentum + s.one_minus_dampening * d;
          expect_close(a.m.f32()[i], b, "buf", i);
          expect_close(a.p.f32()[i], p0 - r.step * (nesterov ? d + s.momentum * b : b), "p", i);
        }
      }
    }
  }
  const State before = random_state(4), a = before.clone();
  cpu->sgd_update(step_of(a, runs, false), OptimizerScalars{});
  for (int64_t i = 0; i < 100; ++i) {
    expect_close(a.p.f32()[i], before.p.f32()[i] - 0.1f * (before.g.f32()[i] + 1e-2f * before.p.f32()[i]), "p", i);
  }
}

TEST(BackendOptimizerOps, SumOfSquaresUsesFixedLanesPerPart) {
  auto cpu = make_cpu_backend();
  std::mt19937 rng(5);
  const Tensor x = random_tensor(kN, rng, -3, 3);
  const std::vector<int64_t> bounds = {0, 37, 37, 512, kN};
  // The contract's order, written out: 16 lanes per part, tree-reduced, parts added from 0.0.
  double want = 0.0;
  for (size_t k = 0; k + 1 < bounds.size(); ++k) {
    double lanes[16] = {};
    for (int64_t i = bounds[k]; i < bounds[k + 1]; ++i) {
      const double v = x.f32()[i];
      lanes[(i - bounds[k]) % 16] += v * v;
    }
    for (int w = 8; w > 0; w /= 2) {
      for (int j = 0; j < w; ++j) lanes[j] += lanes[j + w];
    }
    want += lanes[0];
  }
  const double got = cpu->sum_of_squares(x, bounds);
  EXPECT_NEAR(got, want, 1e-12 * want);
  EXPECT_EQ(cpu->sum_of_squares(x, bounds), got);
  ProfilingBackend profiled(*cpu);
  EXPECT_EQ(profiled.sum_of_squares(x, bounds), got);
  EXPECT_EQ(host_backend().sum_of_squares(x, bounds), got);
}

TEST(BackendOptimizerOps, ZeroAndHostCopies) {
  auto cpu = make_cpu_backend();
  std::mt19937 rng(6);
  const Tensor device = random_tensor(kN, rng, -1, 1), host = Tensor::zeros({kN});
  cpu->copy_to_host(device.slice(10, 20), host.slice(0, 10));
  EXPECT_EQ(std::memcmp(host.raw(), device.f32() + 10, 10 * sizeof(float)), 0);
  cpu->copy_from_host(host.slice(0, 10), device.slice(500, 510));
  EXPECT_EQ(std::memcmp(device.f32() + 500, device.f32() + 10, 10 * sizeof(float)), 0);
  EXPECT_THROW(cpu->copy_to_host(device.slice(0, 3), host.slice(0, 4)), Error);
  const Tensor bf = Tensor::empty({7}, DType::bf16);
  std::memset(bf.raw(), 0xff, bf.nbytes());
  cpu->zero(bf);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(bf.u16()[i], 0);
  cpu->zero(device.slice(0, 5));
  EXPECT_EQ(device.f32()[4], 0.0f);
  EXPECT_NE(device.f32()[5], 0.0f);
}
