// AdamW as torch.optim.AdamW (single-tensor path), optionally without bias correction. One pass over p, g, m, v.
#include <cmath>

#include "train/optimizer_kinds.h"

namespace vitpipe {
namespace {

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

class AdamW final : public Optimizer {
 public:
  AdamW(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout, int first, int last,
        OptimizerShard shard)
      : Optimizer(config, std::move(layout), first, last, std::move(shard)),
        exp_avg_(make_buffer()),
        exp_avg_sq_(make_buffer()) {}

 private:
  void update(float* params, const float* grads, double lr) override {
    const double t = static_cast<double>(step_count_);
    const double bias_correction1 = config_.bias_correction ? 1.0 - std::pow(config_.beta1, t) : 1.0;
    const double bias_correction2 = config_.bias_correction ? 1.0 - std::pow(config_.beta2, t) : 1.0;
    float* m = exp_avg_.data();
    float* v = exp_avg_sq_.data();
    plan_.for_each_piece([&](int64_t, const UpdatePiece& piece) {
      const UpdateParam& param = plan_.params()[static_cast<size_t>(piece.param)];
      const double group_lr = lr * param.lr_scale;
      AdamScalars s;
      s.decay = static_cast<float>(1.0 - group_lr * (param.decays ? config_.weight_decay : 0.0));
      s.beta1 = static_cast<float>(config_.beta1);
      s.one_minus_beta1 = static_cast<float>(1.0 - config_.beta1);
      s.beta2 = static_cast<float>(config_.beta2);
      s.one_minus_beta2 = static_cast<float>(1.0 - config_.beta2);
      s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
      s.eps = static_cast<float>(config_.eps);
      s.step_size = static_cast<float>(group_lr / bias_correction1);
      const int64_t b = piece.begin;
      adamw_kernel(params + b, grads + b, m + b, v + b, piece.end - b, s);
    });
  }

  std::vector<std::pair<std::string, const FlatParameters*>> buffers() const override {
    return {{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}};
  }

  FlatParameters exp_avg_;
  FlatParameters exp_avg_sq_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adamw(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout,
                                      int first_segment, int last_segment, OptimizerShard shard) {
  return std::make_unique<AdamW>(config, std::move(layout), first_segment, last_segment, std::move(shard));
}

}  // namespace vitpipe
