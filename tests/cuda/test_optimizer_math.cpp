// Proof 1 for the optimizer kernels (issue 24): AdamW, SGD with momentum and LAMB's per-element updates and trust
// ratio (backend/cuda/kernels/optimizer_math.h), applied over a small ViT's flat parameters on the CPU, against
// vitpipe's CPU optimizers (train/optimizer_*.cpp) and a float64 reference of train/optimizer.h's formulas, over
// three steps: parameters and moments within 1e-5 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/kernels/optimizer_math.h"
#include "model/parameter_layout.h"
#include "train/optimizer.h"
#include "util/random.h"

using namespace vitpipe;

namespace {

constexpr double kTolerance = 1e-5;
constexpr int kSteps = 3;
constexpr double kLr = 1e-3;

std::shared_ptr<const ParameterLayout> small_layout() {
  ViTConfig config;
  config.hidden_size = 40;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.intermediate_size = 160;
  config.image_size = 16;
  config.patch_size = 4;
  config.labels = {"a", "b", "c"};
  return std::make_shared<const ParameterLayout>(config);
}

std::vector<float> random_values(int64_t n, uint64_t seed, double stddev) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.normal(0.0, stddev));
  return v;
}

// |got - want| <= rel * max(|want|, rms(want)) for every element (as tests/train/test_optimizers.cpp measures).
template <class Want>
void expect_close(const float* got, const std::vector<Want>& want, const std::string& what) {
  double rms = 0.0;
  for (const Want w : want) rms += double(w) * double(w);
  rms = std::sqrt(rms / static_cast<double>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    const double bound = kTolerance * std::max<double>(std::abs(double(want[i])), rms);
    ASSERT_LE(std::abs(double(got[i]) - double(want[i])), bound) << what << " element " << i;
  }
}

struct OptimizerRun {
  OptimizerConfig config;
  std::shared_ptr<const ParameterLayout> layout = small_layout();
  std::vector<float> params0 = random_values(layout->numel(), 1, 0.05);
  std::vector<std::vector<float>> grads;
  explicit OptimizerRun(const std::string& name) : config(optimizer_config_named(name)) {
    config.weight_decay = 0.05;
    for (int s = 0; s < kSteps; ++s) grads.push_back(random_values(layout->numel(), 10 + s, 1.0));
  }
  // vitpipe's CPU optimizer over the same steps; returns its parameters and state tensors.
  std::pair<std::vector<float>, TensorMap> cpu() const {
    auto optimizer = make_optimizer(config, layout, 0, layout->num_segments() - 1);
    FlatParameters p = FlatParameters::whole_model(layout), g = FlatParameters::whole_model(layout);
    std::copy(params0.begin(), params0.end(), p.data());
    for (int s = 0; s < kSteps; ++s) {
      std::copy(grads[s].begin(), grads[s].end(), g.data());
      optimizer->step(p, g, kLr);
    }
    return {std::vector<float>(p.data(), p.data() + p.numel()), optimizer->state_tensors()};
  }
};

TEST(OptimizerMath, AdamWMatchesTheCpuOptimizerAndFloat64) {
  const OptimizerRun run("adamw");
  const OptimizerConfig& c = run.config;
  std::vector<float> p = run.params0, m(p.size(), 0.0f), v(p.size(), 0.0f);
  std::vector<double> p64(p.begin(), p.end()), m64(p.size(), 0.0), v64(p.size(), 0.0);
  for (int step = 1; step <= kSteps; ++step) {
    const std::vector<float>& g = run.grads[step - 1];
    for (const ParamSpec& spec : run.layout->specs()) {
      const cuda::AdamWScalars s =
          cuda::adamw_scalars(kLr, c.weight_decay, spec.decays(), c.beta1, c.beta2, c.eps, step, c.bias_correction);
      const double wd = spec.decays() ? c.weight_decay : 0.0;
      const double bc1 = 1.0 - std::pow(c.beta1, step), bc2 = 1.0 - std::pow(c.beta2, step);
      for (int64_t i = spec.offset; i < spec.offset + spec.numel; ++i) {
        cuda::adamw_update(p[i], g[i], m[i], v[i], s);
        p64[i] *= 1.0 - kLr * wd;
        m64[i] = c.beta1 * m64[i] + (1.0 - c.beta1) * g[i];
        v64[i] = c.beta2 * v64[i] + (1.0 - c.beta2) * double(g[i]) * g[i];
        p64[i] -= kLr / bc1 * m64[i] / (std::sqrt(v64[i]) / std::sqrt(bc2) + c.eps);
      }
    }
  }
  const auto [cpu_p, state] = run.cpu();
  expect_close(p.data(), cpu_p, "params vs CPU");
  expect_close(m.data(), std::vector<float>(state.at("exp_avg").f32(), state.at("exp_avg").f32() + p.size()), "m");
  expect_close(v.data(), std::vector<float>(state.at("exp_avg_sq").f32(), state.at("exp_avg_sq").f32() + p.size()),
               "v");
  expect_close(p.data(), p64, "params vs float64");
}

TEST(OptimizerMath, SgdWithMomentumMatchesTheCpuOptimizerAndFloat64) {
  for (const bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "heavy ball");
    OptimizerRun run("sgd");
    OptimizerConfig& c = run.config;
    c.momentum = 0.9, c.nesterov = nesterov;
    c.dampening = nesterov ? 0.0 : 0.1;  // torch: Nesterov needs no dampening
    std::vector<float> p = run.params0, buf(p.size(), 0.0f);
    std::vector<double> p64(p.begin(), p.end()), buf64(p.size(), 0.0);
    for (int step = 1; step <= kSteps; ++step) {
      const std::vector<float>& g = run.grads[step - 1];
      for (const ParamSpec& spec : run.layout->specs()) {
        const float wd = static_cast<float>(spec.decays() ? c.weight_decay : 0.0);
        const cuda::SgdScalars s{wd,
                                 static_cast<float>(c.momentum),
                                 static_cast<float>(1.0 - c.dampening),
                                 static_cast<float>(kLr),
                                 step == 1,
                                 nesterov};
        for (int64_t i = spec.offset; i < spec.offset + spec.numel; ++i) {
          cuda::sgd_momentum_update(p[i], g[i], buf[i], s);
          const double d = g[i] + (spec.decays() ? c.weight_decay : 0.0) * p64[i];
          buf64[i] = step == 1 ? d : c.momentum * buf64[i] + (1.0 - c.dampening) * d;
          p64[i] -= kLr * (nesterov ? d + c.momentum * buf64[i] : buf64[i]);
        }
      }
    }
    const auto [cpu_p, state] = run.cpu();
    expect_close(p.data(), cpu_p, "params vs CPU");
    const Tensor& b = state.at("momentum_buffer");
    expect_close(buf.data(), std::vector<float>(b.f32(), b.f32() + p.size()), "momentum buffer");
    expect_close(p.data(), p64, "params vs float64");
  }
}

TEST(OptimizerMath, LambWithItsTrustRatioMatchesTheCpuOptimizerAndFloat64) {
  const OptimizerRun run("lamb");
  const OptimizerConfig& c = run.config;
  std::vector<float> p = run.params0, m(p.size(), 0.0f), v(p.size(), 0.0f), u(p.size());
  std::vector<double> p64(p.begin(), p.end()), m64(p.size(), 0.0), v64(p.size(), 0.0), u64(p.size());
  int tensors_with_ratio = 0;
  for (int step = 1; step <= kSteps; ++step) {
    const std::vector<float>& g = run.grads[step - 1];
    const double bc1 = 1.0 - std::pow(c.beta1, step), bc2 = 1.0 - std::pow(c.beta2, step);
    for (const ParamSpec& spec : run.layout->specs()) {
      const cuda::LambScalars s =
          cuda::lamb_scalars(c.weight_decay, spec.decays(), c.beta1, c.beta2, c.eps, step, c.bias_correction);
      const double wd = spec.decays() ? c.weight_decay : 0.0;
      double p_sq = 0, u_sq = 0, p_sq64 = 0, u_sq64 = 0;
      for (int64_t i = spec.offset; i < spec.offset + spec.numel; ++i) {
        const double ui = cuda::lamb_moments(p[i], g[i], m[i], v[i], s);
        p_sq += double(p[i]) * p[i], u_sq += ui * ui;
        m64[i] = c.beta1 * m64[i] + (1.0 - c.beta1) * g[i];
        v64[i] = c.beta2 * v64[i] + (1.0 - c.beta2) * double(g[i]) * g[i];
        u64[i] = (m64[i] / bc1) / (std::sqrt(v64[i] / bc2) + c.eps) + wd * p64[i];
        p_sq64 += p64[i] * p64[i], u_sq64 += u64[i] * u64[i];
      }
      const double ratio = cuda::lamb_trust_ratio(p_sq, u_sq, spec.decays());
      const double ratio64 = spec.decays() ? std::sqrt(p_sq64) / std::sqrt(u_sq64) : 1.0;
      tensors_with_ratio += ratio != 1.0;
      const float step_size = static_cast<float>(kLr * ratio);
      for (int64_t i = spec.offset; i < spec.offset + spec.numel; ++i) {
        cuda::lamb_apply(p[i], m[i], v[i], s, step_size);
        p64[i] -= kLr * ratio64 * u64[i];
      }
    }
  }
  EXPECT_GT(tensors_with_ratio, 0);  // the trust ratio was exercised, not always 1
  const auto [cpu_p, state] = run.cpu();
  expect_close(p.data(), cpu_p, "params vs CPU");
  expect_close(m.data(), std::vector<float>(state.at("exp_avg").f32(), state.at("exp_avg").f32() + p.size()), "m");
  expect_close(p.data(), p64, "params vs float64");
}

}  // namespace
