// The optimizers' per-element updates as the CUDA kernels will compute them, with the same float operations in the
// same order as the CPU optimizers (train/optimizer_adamw.cpp, optimizer_sgd.cpp, optimizer_lamb.cpp; formulas in
// train/optimizer.h), and the per-step scalars computed in double on the host as they are there. The CPU suite holds
// them to a float64 reference and to vitpipe's CPU optimizers (tests/cuda/test_optimizer_math.cpp). On a GPU, nvcc
// may fuse multiply-adds that the host rounds twice: the two agree to rounding, not bit for bit.
#pragma once

#include <math.h>

#include <cstdint>

#include "backend/cuda/kernels/host_device.h"

namespace vitpipe::cuda {

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
  const float decayed = p * s.decay;
  const float mi = m * s.beta1 + g * s.one_minus_beta1;
  const float vi = v * s.beta2 + s.one_minus_beta2 * g * g;
  m = mi;
  v = vi;
  const float denom = sqrtf(vi) / s.bias_correction2_sqrt + s.eps;
  p = decayed - s.step_size * (mi / denom);
}

// ---- SGD with momentum (torch.optim.SGD: coupled decay, buffer = the first direction on step 1) ----
struct SgdScalars {
  float weight_decay;  // 0 where the parameter does not decay
  float momentum, one_minus_dampening;
  float lr;
  bool first_step, nesterov;
};

VITPIPE_HOST_DEVICE void sgd_momentum_update(float& p, float g, float& buffer, const SgdScalars& s) {
  const float d = s.weight_decay != 0.0f ? g + s.weight_decay * p : g;
  const float b = s.first_step ? d : buffer * s.momentum + s.one_minus_dampening * d;
  buffer = b;
  const float direction = s.nesterov ? d + s.momentum * b : b;
  p = p - s.lr * direction;
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
  return (m / s.bias_correction1) / (sqrtf(v / s.bias_correction2) + s.eps) + s.decay * p;
}

// Pass 1 per element: the new moments; returns u, whose square (with p's) the tensor's norms sum.
VITPIPE_HOST_DEVICE float lamb_moments(float p, float g, float& m, float& v, const LambScalars& s) {
  const float mi = m * s.beta1 + s.one_minus_beta1 * g;
  const float vi = v * s.beta2 + s.one_minus_beta2 * g * g;
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
  p = p - step * lamb_direction(p, m, v, s);
}

}  // namespace vitpipe::cuda
