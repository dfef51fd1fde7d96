// The optimizers' per-element updates as the CUDA kernels will compute them, with the same float operations in the
// same order as the CPU optimizers (train/optimizer_adamw.cpp, optimizer_sgd.cpp, optimizer_lamb.cpp; formulas in
// train/optimizer.h), and the per-step scalars computed in double on the host as they are there. The CPU suite holds
// them to a float64 reference and to vitpipe's CPU optimizers (tests/cuda/test_optimizer_math.cpp). Every operation
// of the updates goes through the rounding helpers below: on the device the _rn intrinsics, which nvcc never fuses into
// a multiply-add, so each operation of backend.h's formulas is rounded once, in the contracts' order (the fakes' host
// launchers are compiled with -ffp-contract=off to match). The CPU backend's loops, compiled with contraction on for
// an FMA-capable baseline, fuse some of them: updates agree with it to the last bit or two (1e-6 relative), not bit for
// bit. The 16-lane sums of squares (add_square) are bit for bit. The per-run entry points below are backend.h's
// contracts (adamw_update, lamb_moments, lamb_update, sgd_update, sum_of_squares) element for element.
#pragma once

#include <math.h>

#include <cstdint>

#include "backend/cuda/kernels/host_device.h"

namespace vitpipe::cuda {

// ---- one rounding per operation on host and device (no fused multiply-add) ----
VITPIPE_HOST_DEVICE float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
VITPIPE_HOST_DEVICE float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
VITPIPE_HOST_DEVICE float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
VITPIPE_HOST_DEVICE float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
VITPIPE_HOST_DEVICE float sqrt_rn(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return sqrtf(a);
#endif
}
VITPIPE_HOST_DEVICE double mul_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
VITPIPE_HOST_DEVICE double add_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
// x * y + z rounded once (the fused multiply-add).
VITPIPE_HOST_DEVICE double fma_rn(double x, double y, double z) {
#ifdef __CUDA_ARCH__
  return __fma_rn(x, y, z);
#else
  return fma(x, y, z);
#endif
}

// ---- AdamW (torch.optim.AdamW; decoupled decay: p *= 1 - lr wd before the update) ----
struct AdamWScalars {
  float decay;  // 1 - lr wd (1 where the parameter does not decay)
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bias_correction2_sqrt;
  float eps;
  float step_size;  // lr / bias_correction1
};

inline AdamWScalars adamw_scalars(double lr, double weight_decay, bool decays, double beta1, double beta2, double eps,
                                  int64_t step, bool bias_correction) {
  const double t = static_cast<double>(step);
  const double bc1 = bias_correction ? 1.0 - pow(beta1, t) : 1.0;
  const double bc2 = bias_correction ? 1.0 - pow(beta2, t) : 1.0;
  return {static_cast<float>(1.0 - lr * (decays ? weight_decay : 0.0)),
          static_cast<float>(beta1),
          static_cast<float>(1.0 - beta1),
          static_cast<float>(beta2),
          static_cast<float>(1.0 - beta2),
          static_cast<float>(sqrt(bc2)),
          static_cast<float>(eps),
          static_cast<float>(lr / bc1)};
}

VITPIPE_HOST_DEVICE void adamw_update(float& p, float g, float& m, float& v, const AdamWScalars& s) {
  const float decayed = mul_rn(p, s.decay);
  const float mi = add_rn(mul_rn(m, s.beta1), mul_rn(g, s.one_minus_beta1));
  const float vi = add_rn(mul_rn(v, s.beta2), mul_rn(mul_rn(s.one_minus_beta2, g), g));
  m = mi;
  v = vi;
  const float denom = add_rn(div_rn(sqrt_rn(vi), s.bias_correction2_sqrt), s.eps);
  p = sub_rn(decayed, mul_rn(s.step_size, div_rn(mi, denom)));
}

// ---- SGD with momentum (torch.optim.SGD: coupled decay, buffer = the first direction on step 1) ----
struct SgdScalars {
  float weight_decay;  // 0 where the parameter does not decay
  float momentum, one_minus_dampening;
  float lr;
  bool first_step, nesterov;
};

VITPIPE_HOST_DEVICE float sgd_direction(float p, float g, const SgdScalars& s) {
  return s.weight_decay != 0.0f ? add_rn(g, mul_rn(s.weight_decay, p)) : g;
}

VITPIPE_HOST_DEVICE void sgd_momentum_update(float& p, float g, float& buffer, const SgdScalars& s) {
  const float d = sgd_direction(p, g, s);
  const float b = s.first_step ? d : add_rn(mul_rn(buffer, s.momentum), mul_rn(s.one_minus_dampening, d));
  buffer = b;
  const float direction = s.nesterov ? add_rn(d, mul_rn(s.momentum, b)) : b;
  p = sub_rn(p, mul_rn(s.lr, direction));
}

// Without momentum (no buffer): p -= lr d.
VITPIPE_HOST_DEVICE void sgd_update(float& p, float g, const SgdScalars& s) {
  p = sub_rn(p, mul_rn(s.lr, sgd_direction(p, g, s)));
}

// ---- LAMB (NVIDIA apex FusedLAMB): u = (m / bc1) / (sqrt(v / bc2) + eps) + wd p; p -= lr r u ----
struct LambScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bias_correction1, bias_correction2;
  float eps;
  float decay;  // weight decay of this parameter (0 where it does not decay)
};

inline LambScalars lamb_scalars(double weight_decay, bool decays, double beta1, double beta2, double eps, int64_t step,
                                bool bias_correction) {
  const double t = static_cast<double>(step);
  return {static_cast<float>(beta1),
          static_cast<float>(1.0 - beta1),
          static_cast<float>(beta2),
          static_cast<float>(1.0 - beta2),
          static_cast<float>(bias_correction ? 1.0 - pow(beta1, t) : 1.0),
          static_cast<float>(bias_correction ? 1.0 - pow(beta2, t) : 1.0),
          static_cast<float>(eps),
          static_cast<float>(decays ? weight_decay : 0.0)};
}

VITPIPE_HOST_DEVICE float lamb_direction(float p, float m, float v, const LambScalars& s) {
  return add_rn(div_rn(div_rn(m, s.bias_correction1), add_rn(sqrt_rn(div_rn(v, s.bias_correction2)), s.eps)),
                mul_rn(s.decay, p));
}

// Pass 1 per element: the new moments; returns u, whose square (with p's) the tensor's norms sum.
VITPIPE_HOST_DEVICE float lamb_moments(float p, float g, float& m, float& v, const LambScalars& s) {
  const float mi = add_rn(mul_rn(m, s.beta1), mul_rn(s.one_minus_beta1, g));
  const float vi = add_rn(mul_rn(v, s.beta2), mul_rn(mul_rn(s.one_minus_beta2, g), g));
  m = mi;
  v = vi;
  return lamb_direction(p, mi, vi, s);
}

// The trust ratio ||p|| / ||u|| of a whole tensor from its sums of squares (double, as on the host); 1 where either
// norm is 0 or the parameter does not decay.
VITPIPE_HOST_DEVICE double lamb_trust_ratio(double p_squares, double u_squares, bool decays) {
  const double pn = sqrt(p_squares), un = sqrt(u_squares);
  return decays && pn > 0.0 && un > 0.0 ? pn / un : 1.0;
}

// Pass 2 per element: recomputes u from the new moments (the same float operations, so the same u) and applies it.
VITPIPE_HOST_DEVICE void lamb_apply(float& p, float m, float v, const LambScalars& s, float step) {
  p = sub_rn(p, mul_rn(step, lamb_direction(p, m, v, s)));
}

// ---- backend.h's optimizer ops, per run ----
// backend.h's OptimizerRun and OptimizerScalars as plain data the kernels take (CudaBackend copies the runs into
// device scratch: one table for a whole step, one launch over all runs).
struct OptimizerRunView {
  int64_t begin, end;
  float decay, step;
};
struct OptimizerStepScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bias_correction1, bias_correction2, bias_correction2_sqrt;
  float eps;
  float momentum, one_minus_dampening;
  bool first_step, nesterov;
};

VITPIPE_HOST_DEVICE AdamWScalars adamw_run_scalars(const OptimizerStepScalars& s, const OptimizerRunView& r) {
  return {r.decay, s.beta1, s.one_minus_beta1, s.beta2, s.one_minus_beta2, s.bias_correction2_sqrt, s.eps, r.step};
}
VITPIPE_HOST_DEVICE LambScalars lamb_run_scalars(const OptimizerStepScalars& s, const OptimizerRunView& r) {
  return {s.beta1, s.one_minus_beta1, s.beta2, s.one_minus_beta2, s.bias_correction1, s.bias_correction2, s.eps,
          r.decay};
}
VITPIPE_HOST_DEVICE SgdScalars sgd_run_scalars(const OptimizerStepScalars& s, const OptimizerRunView& r) {
  return {r.decay, s.momentum, s.one_minus_dampening, r.step, s.first_step, s.nesterov};
}

// The element-wise updates run over tiles of kOptimizerTile elements; tile_starts[r] is the first tile of run r
// (tile_starts[runs] the tile count): a run of n elements has ceil(n / kOptimizerTile) tiles.
constexpr int64_t kOptimizerTile = 1024;
inline int64_t optimizer_tiles(int64_t elements) { return (elements + kOptimizerTile - 1) / kOptimizerTile; }
// The run that holds `tile`: the last r with tile_starts[r] <= tile (runs without tiles are skipped).
VITPIPE_HOST_DEVICE int64_t run_of_tile(const int64_t* tile_starts, int64_t runs, int64_t tile) {
  int64_t lo = 0, hi = runs;  // tile_starts[lo] <= tile < tile_starts[hi]
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (tile_starts[mid] <= tile) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// ---- sums of squares in 16 fixed lanes (backend.h: lamb_moments, sum_of_squares) ----
// Lane k of a run of n elements adds elements k, k + 16, ... in order (relative to the run's first element); then
// lanes[k] += lanes[k + w] for w = 8, 4, 2, 1; the result is lanes[0].
constexpr int kSquareLanes = 16;
// Each element is added as lane + x * x rounded ONCE (a fused multiply-add): the CPU backend's loop
// (cpu/optimizer_kernels.cpp, `lanes[k] += v * v`) is compiled at its x86-64-v3 baseline in C++ with contraction on,
// and g++ makes it exactly this fma; the lane sums then agree bit for bit.
VITPIPE_HOST_DEVICE double add_square(double lane, double x) { return fma_rn(x, x, lane); }
// The fixed butterfly over 16 lanes held in one array (the host's form; the device does it with warp shuffles).
VITPIPE_HOST_DEVICE double fold_lanes(double* lanes) {
  for (int w = kSquareLanes / 2; w > 0; w /= 2) {
    for (int k = 0; k < w; ++k) lanes[k] = add_rn(lanes[k], lanes[k + w]);
  }
  return lanes[0];
}

}  // namespace vitpipe::cuda
