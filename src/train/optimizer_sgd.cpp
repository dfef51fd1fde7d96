// SGD as torch.optim.SGD: coupled weight decay, momentum buffer initialised to the first direction, optional
// dampening and Nesterov. One pass over p, g (and the buffer when momentum is on), behind the backend
// (Backend::sgd_update).
#include <utility>

#include "train/optimizer_kinds.h"

namespace vitpipe {
namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout, int first, int last,
      OptimizerShard shard, Backend* backend)
      : Optimizer(config, std::move(layout), first, last, std::move(shard), backend) {
    if (config_.momentum != 0.0) momentum_buffer_ = make_buffer();
  }

 private:
  void update(const Tensor& params, const Tensor& grads, double lr) override {
    OptimizerScalars s;
    s.momentum = static_cast<float>(config_.momentum);
    s.one_minus_dampening = static_cast<float>(1.0 - config_.dampening);
    s.first_step = step_count_ == 1;
    s.nesterov = config_.nesterov;
    fill_runs([&](const UpdateParam& param) {
      return std::pair{static_cast<float>(param.decays ? config_.weight_decay : 0.0),
                       static_cast<float>(lr * param.lr_scale)};
    });
    backend_->sgd_update(step_args(params, grads, config_.momentum != 0.0 ? &momentum_buffer_ : nullptr, nullptr), s);
  }

  std::vector<std::pair<std::string, const FlatParameters*>> buffers() const override {
    if (config_.momentum == 0.0) return {};
    return {{"momentum_buffer", &momentum_buffer_}};
  }

  FlatParameters momentum_buffer_;
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout,
                                    int first_segment, int last_segment, OptimizerShard shard, Backend* backend) {
  return std::make_unique<Sgd>(config, std::move(layout), first_segment, last_segment, std::move(shard), backend);
}

}  // namespace vitpipe
