// Classification losses on the [B, L] logits, in double precision (they are tiny). Each returns the SUM of the
// per-element losses and writes grad_scale * d(sum)/d(logits): the caller picks the scale that turns sums over
// micro-batches into the mean over the global batch.
#include <cmath>

#include "backend/cpu/kernels/cpu_backend.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {

double CpuBackend::bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor* pos_weight,
                                   const Tensor* weight, double grad_scale, const Tensor& grad_logits) {
  VP_REQUIRE(logits.rank() == 2 && targets.numel() == logits.numel() && grad_logits.numel() == logits.numel() &&
                 targets.dtype() == DType::f32,
             "bce_with_logits: logits ", shape_string(logits.shape()), " and targets ", shape_string(targets.shape()),
             " must match");
  const int64_t rows = logits.dim(0), labels = logits.dim(1);
  if (pos_weight)
    VP_REQUIRE(pos_weight->numel() == labels, "bce_with_logits: pos_weight must have ", labels, " entries");
  if (weight)
    VP_REQUIRE(weight->numel() == logits.numel() && weight->dtype() == DType::f32, "bce_with_logits: weight ",
               shape_string(weight->shape()), " must match the logits");
  const float* w = weight ? weight->f32() : nullptr;
  const float* x = logits.f32();
  const float* y = targets.f32();
  float* g = grad_logits.f32();
  double total = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < labels; ++j) {
      const double xv = x[i * labels + j], yv = y[i * labels + j];
      const double pw = pos_weight ? pos_weight->f32()[j] : 1.0;
      const double log_weight = 1.0 + (pw - 1.0) * yv;
      // softplus(-x) computed stably: log(1 + exp(-|x|)) + max(-x, 0)
      const double softplus_neg = std::log1p(std::exp(-std::fabs(xv))) + std::max(-xv, 0.0);
      const double element_weight = w ? w[i * labels + j] : 1.0;
      total += element_weight * ((1.0 - yv) * xv + log_weight * softplus_neg);
      const double sigmoid_neg = 1.0 / (1.0 + std::exp(xv));
      g[i * labels + j] = static_cast<float>(grad_scale * element_weight * ((1.0 - yv) - log_weight * sigmoid_neg));
    }
  }
  return total;
}

double CpuBackend::cross_entropy(const Tensor& logits, const Tensor& targets, double grad_scale,
                                 const Tensor& grad_logits) {
  VP_REQUIRE(logits.rank() == 2 && targets.numel() == logits.dim(0) && targets.dtype() == DType::i64 &&
                 grad_logits.numel() == logits.numel(),
             "cross_entropy: logits ", shape_string(logits.shape()), " need [B] int64 targets");
  const int64_t rows = logits.dim(0), classes = logits.dim(1);
  const float* x = logits.f32();
  const int64_t* t = targets.data<int64_t>();
  float* g = grad_logits.f32();
  double total = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    VP_REQUIRE(t[i] >= 0 && t[i] < classes, "cross_entropy: target ", t[i], " outside [0, ", classes, ")");
    const float* row = x + i * classes;
    double max = row[0];
    for (int64_t j = 1; j < classes; ++j) max = std::max(max, static_cast<double>(row[j]));
    double sum = 0.0;
    for (int64_t j = 0; j < classes; ++j) sum += std::exp(row[j] - max);
    const double log_sum = std::log(sum) + max;
    total += log_sum - row[t[i]];
    for (int64_t j = 0; j < classes; ++j) {
      const double p = std::exp(row[j] - log_sum);
      g[i * classes + j] = static_cast<float>(grad_scale * (p - (j == t[i] ? 1.0 : 0.0)));
    }
  }
  return total;
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
