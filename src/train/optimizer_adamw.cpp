// AdamW as torch.optim.AdamW (single-tensor path), optionally without bias correction. One pass over p, g, m, v,
// behind the backend (Backend::adamw_update); here only the per-step scalars, in double, rounded to float once.
#include <cmath>
#include <utility>

#include "train/optimizer_kinds.h"

namespace vitpipe {
namespace {

class AdamW final : public Optimizer {
 public:
  AdamW(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout, int first, int last,
        OptimizerShard shard, Backend* backend)
      : Optimizer(config, std::move(layout), first, last, std::move(shard), backend),
        exp_avg_(make_buffer()),
        exp_avg_sq_(make_buffer()) {}

 private:
  void update(const Tensor& params, const Tensor& grads, double lr) override {
    const double t = static_cast<double>(step_count_);
    const double bias_correction1 = config_.bias_correction ? 1.0 - std::pow(config_.beta1, t) : 1.0;
    const double bias_correction2 = config_.bias_correction ? 1.0 - std::pow(config_.beta2, t) : 1.0;
    OptimizerScalars s;
    s.beta1 = static_cast<float>(config_.beta1);
    s.one_minus_beta1 = static_cast<float>(1.0 - config_.beta1);
    s.beta2 = static_cast<float>(config_.beta2);
    s.one_minus_beta2 = static_cast<float>(1.0 - config_.beta2);
    s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
    s.eps = static_cast<float>(config_.eps);
    fill_runs([&](const UpdateParam& param) {
      const double group_lr = lr * param.lr_scale;
      return std::pair{static_cast<float>(1.0 - group_lr * (param.decays ? config_.weight_decay : 0.0)),
                       static_cast<float>(group_lr / bias_correction1)};
    });
    backend_->adamw_update(step_args(params, grads, &exp_avg_, &exp_avg_sq_), s);
  }

  std::vector<std::pair<std::string, const FlatParameters*>> buffers() const override {
    return {{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}};
  }

  FlatParameters exp_avg_;
  FlatParameters exp_avg_sq_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adamw(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout,
                                      int first_segment, int last_segment, OptimizerShard shard, Backend* backend) {
  return std::make_unique<AdamW>(config, std::move(layout), first_segment, last_segment, std::move(shard), backend);
}

}  // namespace vitpipe
