#include "backend/cpu/optimizer_kernels.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "util/error.h"

namespace vitpipe::cpu {
namespace {

// The arguments every update checks: f32 tensors of one length, runs inside it, work items over the runs.
void check_step(const OptimizerStep& step, const char* op, bool needs_m, bool needs_v) {
  const int64_t n = step.params.numel();
  auto check = [&](const Tensor& t, const char* name) {
    VP_REQUIRE(t.defined() && t.dtype() == DType::f32 && t.numel() == n, op, ": ", name, " must be f32 [", n, "]");
  };
  check(step.params, "params");
  check(step.grads, "grads");
  if (needs_m) check(step.exp_avg, "exp_avg");
  if (needs_v) check(step.exp_avg_sq, "exp_avg_sq");
  int64_t at = 0;
  for (const OptimizerRun& r : step.runs) {
    VP_REQUIRE(at <= r.begin && r.begin <= r.end && r.end <= n, op, ": run [", r.begin, ", ", r.end,
               ") is out of order or outside [0, ", n, ")");
    at = r.end;
  }
  if (!step.work_items.empty()) {
    VP_REQUIRE(step.work_items.front() == 0 && step.work_items.back() == static_cast<int64_t>(step.runs.size()), op,
               ": work items must start at run 0 and end at the run count");
  }
}

// fn(run_index, run) for every run; work items (or single runs) spread over the OpenMP threads.
template <class Fn>
void for_each_run(const OptimizerStep& step, Fn&& fn) {
  const OptimizerRun* runs = step.runs.data();
  if (step.work_items.empty()) {
    const auto count = static_cast<int64_t>(step.runs.size());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) fn(i, runs[i]);
    return;
  }
  const int64_t* items = step.work_items.data();
  const auto count = static_cast<int64_t>(step.work_items.size()) - 1;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < count; ++c) {
    for (int64_t i = items[c]; i < items[c + 1]; ++i) fn(i, runs[i]);
  }
}

struct AdamScalars {
  float decay;  // 1 - lr*wd (1 for parameters without decay)
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bias_correction2_sqrt;
  float eps;
  float step_size;  // lr / bias_correction1
};

// Memory-bound: reads p, g, m, v and writes p, m, v once; vectorises (sqrt and divide are SIMD instructions).
void adamw_kernel(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
                  const AdamScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float pi = p[i] * s.decay;
    const float mi = m[i] * s.beta1 + gi * s.one_minus_beta1;
    const float vi = v[i] * s.beta2 + s.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / s.bias_correction2_sqrt + s.eps;
    p[i] = pi - s.step_size * (mi / denom);
  }
}

struct LambScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bias_correction1, bias_correction2;
  float eps;
  float decay;  // weight decay of this parameter (0 where it does not decay)
};

inline float lamb_direction(float p, float m, float v, const LambScalars& s) {
  return (m / s.bias_correction1) / (std::sqrt(v / s.bias_correction2) + s.eps) + s.decay * p;
}

// Pass 1: new moments, and sums of p^2 and u^2 over fixed lanes (bits independent of alignment and threads).
void lamb_moments_kernel(const float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                         int64_t n, const LambScalars s, double* p_squares, double* u_squares) {
  constexpr int kLanes = 16;
  double p_lanes[kLanes] = {}, u_lanes[kLanes] = {};
  auto one = [&](int64_t i, int k) {
    const float gi = g[i];
    const float mi = m[i] * s.beta1 + s.one_minus_beta1 * gi;
    const float vi = v[i] * s.beta2 + s.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const double u = lamb_direction(p[i], mi, vi, s);
    const double pd = p[i];
    p_lanes[k] += pd * pd;
    u_lanes[k] += u * u;
  };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) one(i + k, k);
  }
  for (int k = 0; i + k < n; ++k) one(i + k, k);
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int k = 0; k < width; ++k) {
      p_lanes[k] += p_lanes[k + width];
      u_lanes[k] += u_lanes[k + width];
    }
  }
  *p_squares = p_lanes[0];
  *u_squares = u_lanes[0];
}

// Pass 2: p -= step * u.
void lamb_apply_kernel(float* __restrict p, const float* __restrict m, const float* __restrict v, int64_t n,
                       const LambScalars s, float step) {
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] - step * lamb_direction(p[i], m[i], v[i], s);
}

struct SgdScalars {
  float weight_decay;  // 0 where the parameter does not decay
  float momentum, one_minus_dampening;
  float lr;
  bool first_step, nesterov;
};

void sgd_kernel(float* __restrict p, const float* __restrict g, int64_t n, const SgdScalars s) {
  if (s.weight_decay != 0.0f) {
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] - s.lr * (g[i] + s.weight_decay * p[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] - s.lr * g[i];
  }
}

void sgd_momentum_kernel(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n,
                         const SgdScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    const float d = s.weight_decay != 0.0f ? g[i] + s.weight_decay * p[i] : g[i];
    const float b = s.first_step ? d : buf[i] * s.momentum + s.one_minus_dampening * d;
    buf[i] = b;
    const float direction = s.nesterov ? d + s.momentum * b : b;
    p[i] = p[i] - s.lr * direction;
  }
}

LambScalars lamb_scalars(const OptimizerScalars& s, float decay) {
  LambScalars l;
  l.beta1 = s.beta1;
  l.one_minus_beta1 = s.one_minus_beta1;
  l.beta2 = s.beta2;
  l.one_minus_beta2 = s.one_minus_beta2;
  l.bias_correction1 = s.bias_correction1;
  l.bias_correction2 = s.bias_correction2;
  l.eps = s.eps;
  l.decay = decay;
  return l;
}

}  // namespace

void adamw_update(const OptimizerStep& step, const OptimizerScalars& s) {
  check_step(step, "adamw_update", true, true);
  float* p = step.params.f32();
  const float* g = step.grads.f32();
  float* m = step.exp_avg.f32();
  float* v = step.exp_avg_sq.f32();
  for_each_run(step, [&](int64_t, const OptimizerRun& run) {
    AdamScalars a;
    a.decay = run.decay;
    a.beta1 = s.beta1;
    a.one_minus_beta1 = s.one_minus_beta1;
    a.beta2 = s.beta2;
    a.one_minus_beta2 = s.one_minus_beta2;
    a.bias_correction2_sqrt = s.bias_correction2_sqrt;
    a.eps = s.eps;
    a.step_size = run.step;
    const int64_t b = run.begin;
    adamw_kernel(p + b, g + b, m + b, v + b, run.end - b, a);
  });
}

void lamb_moments(const OptimizerStep& step, const OptimizerScalars& s, std::span<double> squares) {
  check_step(step, "lamb_moments", true, true);
  VP_REQUIRE(squares.size() == 2 * step.runs.size(), "lamb_moments: ", squares.size(), " squares for ",
             step.runs.size(), " runs (2 per run)");
  const float* p = step.params.f32();
  const float* g = step.grads.f32();
  float* m = step.exp_avg.f32();
  float* v = step.exp_avg_sq.f32();
  double* out = squares.data();
  for_each_run(step, [&](int64_t index, const OptimizerRun& run) {
    const int64_t b = run.begin;
    lamb_moments_kernel(p + b, g + b, m + b, v + b, run.end - b, lamb_scalars(s, run.decay), &out[2 * index],
                        &out[2 * index + 1]);
  });
}

void lamb_update(const OptimizerStep& step, const OptimizerScalars& s) {
  check_step(step, "lamb_update", true, true);
  float* p = step.params.f32();
  const float* m = step.exp_avg.f32();
  const float* v = step.exp_avg_sq.f32();
  for_each_run(step, [&](int64_t, const OptimizerRun& run) {
    const int64_t b = run.begin;
    lamb_apply_kernel(p + b, m + b, v + b, run.end - b, lamb_scalars(s, run.decay), run.step);
  });
}

void sgd_update(const OptimizerStep& step, const OptimizerScalars& s) {
  const bool momentum = step.exp_avg.raw() != nullptr;
  check_step(step, "sgd_update", momentum, false);
  float* p = step.params.f32();
  const float* g = step.grads.f32();
  float* buf = momentum ? step.exp_avg.f32() : nullptr;
  for_each_run(step, [&](int64_t, const OptimizerRun& run) {
    SgdScalars k;
    k.weight_decay = run.decay;
    k.momentum = s.momentum;
    k.one_minus_dampening = s.one_minus_dampening;
    k.lr = run.step;
    k.first_step = s.first_step;
    k.nesterov = s.nesterov;
    const int64_t b = run.begin;
    if (buf) {
      sgd_momentum_kernel(p + b, g + b, buf + b, run.end - b, k);
    } else {
      sgd_kernel(p + b, g + b, run.end - b, k);
    }
  });
}

double sum_of_squares_lanes(const float* x, int64_t n) {
  constexpr int kLanes = 16;
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const double v = x[i + k];
      lanes[k] += v * v;
    }
  }
  for (int k = 0; i + k < n; ++k) {
    const double v = x[i + k];
    lanes[k] += v * v;
  }
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int k = 0; k < width; ++k) lanes[k] += lanes[k + width];
  }
  return lanes[0];
}

double sum_of_squares(const Tensor& x, std::span<const int64_t> bounds) {
  VP_REQUIRE(x.dtype() == DType::f32, "sum_of_squares: x must be f32");
  const int64_t n = x.numel();
  if (bounds.empty()) {
    VP_REQUIRE(n == 0, "sum_of_squares: no bounds for ", n, " elements");
    return 0.0;
  }
  VP_REQUIRE(bounds.front() == 0 && bounds.back() == n, "sum_of_squares: bounds must run from 0 to ", n);
  for (size_t k = 1; k < bounds.size(); ++k) {
    VP_REQUIRE(bounds[k - 1] <= bounds[k], "sum_of_squares: bounds must ascend");
  }
  const int64_t chunks = static_cast<int64_t>(bounds.size()) - 1;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  const float* g = x.f32();
  const int64_t* bound = bounds.data();
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    partial[static_cast<size_t>(c)] = sum_of_squares_lanes(g + bound[c], bound[c + 1] - bound[c]);
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

void zero(const Tensor& t) {
  if (t.nbytes() > 0) std::memset(t.raw(), 0, t.nbytes());
}

void copy_tensor(const Tensor& from, const Tensor& to, const char* what) {
  VP_REQUIRE(from.dtype() == to.dtype() && from.numel() == to.numel(), what, ": ", dtype_name(from.dtype()), " ",
             shape_string(from.shape()), " to ", dtype_name(to.dtype()), " ", shape_string(to.shape()),
             " (the dtype and element count must match)");
  if (from.nbytes() > 0 && from.raw() != to.raw()) std::memcpy(to.raw(), from.raw(), from.nbytes());
}

}  // namespace vitpipe::cpu
