// LAMB as NVIDIA apex's FusedLAMB computes it (optimizer.h has the formula). Two passes behind the backend, because
// the trust ratio needs whole-tensor norms before any element is updated: Backend::lamb_moments updates m and v and
// returns ||p||^2 and ||u||^2 per run (piece); the host adds them per tensor in piece order, forms the trust ratios
// and Backend::lamb_update recomputes u from the new m, v (the same float operations, so the same u) and applies it.
// This streams p, g, m, v, then p, m, v, instead of keeping a u buffer as large as the parameters.
#include <cmath>
#include <utility>

#include "train/optimizer_kinds.h"

namespace vitpipe {
namespace {

class Lamb final : public Optimizer {
 public:
  Lamb(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout, int first, int last,
       OptimizerShard shard, Backend* backend)
      : Optimizer(config, std::move(layout), first, last, std::move(shard), backend),
        exp_avg_(make_buffer()),
        exp_avg_sq_(make_buffer()) {
    squares_.resize(2 * plan_.pieces().size());
    trust_ratio_.resize(plan_.params().size());
  }

 private:
  void update(const Tensor& params, const Tensor& grads, double lr) override {
    const double t = static_cast<double>(step_count_);
    OptimizerScalars s;
    s.beta1 = static_cast<float>(config_.beta1);
    s.one_minus_beta1 = static_cast<float>(1.0 - config_.beta1);
    s.beta2 = static_cast<float>(config_.beta2);
    s.one_minus_beta2 = static_cast<float>(1.0 - config_.beta2);
    s.bias_correction1 = static_cast<float>(config_.bias_correction ? 1.0 - std::pow(config_.beta1, t) : 1.0);
    s.bias_correction2 = static_cast<float>(config_.bias_correction ? 1.0 - std::pow(config_.beta2, t) : 1.0);
    s.eps = static_cast<float>(config_.eps);
    fill_runs([&](const UpdateParam& param) {
      return std::pair{static_cast<float>(param.decays ? config_.weight_decay : 0.0), 0.0f};
    });
    backend_->lamb_moments(step_args(params, grads, &exp_avg_, &exp_avg_sq_), s, squares_);

    std::vector<double> p_norm(plan_.params().size(), 0.0), u_norm(plan_.params().size(), 0.0);
    for (size_t i = 0; i < plan_.pieces().size(); ++i) {
      const size_t param = static_cast<size_t>(plan_.pieces()[i].param);
      p_norm[param] += squares_[2 * i];
      u_norm[param] += squares_[2 * i + 1];
    }
    sum_across_shards(p_norm, u_norm);  // sharded: a tensor's other pieces live on other replicas
    for (size_t i = 0; i < trust_ratio_.size(); ++i) {
      const double pn = std::sqrt(p_norm[i]), un = std::sqrt(u_norm[i]);
      trust_ratio_[i] = plan_.params()[i].decays && pn > 0.0 && un > 0.0 ? pn / un : 1.0;
    }

    for (size_t i = 0; i < runs_.size(); ++i) {
      const UpdatePiece& piece = plan_.pieces()[i];
      const UpdateParam& param = plan_.params()[static_cast<size_t>(piece.param)];
      runs_[i].step = static_cast<float>(lr * param.lr_scale * trust_ratio_[static_cast<size_t>(piece.param)]);
    }
    backend_->lamb_update(step_args(params, grads, &exp_avg_, &exp_avg_sq_), s);
  }

  std::vector<std::pair<std::string, const FlatParameters*>> buffers() const override {
    return {{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}};
  }

  FlatParameters exp_avg_;
  FlatParameters exp_avg_sq_;
  std::vector<double> squares_;  // per piece: ||p||^2, ||u||^2
  std::vector<double> trust_ratio_;
};

}  // namespace

std::unique_ptr<Optimizer> make_lamb(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout,
                                     int first_segment, int last_segment, OptimizerShard shard, Backend* backend) {
  return std::make_unique<Lamb>(config, std::move(layout), first_segment, last_segment, std::move(shard), backend);
}

}  // namespace vitpipe
