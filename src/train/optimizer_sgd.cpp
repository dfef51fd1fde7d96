// SGD as torch.optim.SGD: coupled weight decay, momentum buffer initialised to the first direction, optional
// dampening and Nesterov. One pass over p, g (and the buffer when momentum is on).
#include "train/optimizer_kinds.h"

namespace vitpipe {
namespace {

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

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout, int first, int last,
      OptimizerShard shard)
      : Optimizer(config, std::move(layout), first, last, std::move(shard)) {
    if (config_.momentum != 0.0) momentum_buffer_ = make_buffer();
  }

 private:
  void update(float* params, const float* grads, double lr) override {
    float* buf = config_.momentum != 0.0 ? momentum_buffer_.data() : nullptr;
    plan_.for_each_piece([&](int64_t, const UpdatePiece& piece) {
      const UpdateParam& param = plan_.params()[static_cast<size_t>(piece.param)];
      SgdScalars s;
      s.weight_decay = static_cast<float>(param.decays ? config_.weight_decay : 0.0);
      s.momentum = static_cast<float>(config_.momentum);
      s.one_minus_dampening = static_cast<float>(1.0 - config_.dampening);
      s.lr = static_cast<float>(lr * param.lr_scale);
      s.first_step = step_count_ == 1;
      s.nesterov = config_.nesterov;
      const int64_t b = piece.begin;
      if (buf) {
        sgd_momentum_kernel(params + b, grads + b, buf + b, piece.end - b, s);
      } else {
        sgd_kernel(params + b, grads + b, piece.end - b, s);
      }
    });
  }

  std::vector<std::pair<std::string, const FlatParameters*>> buffers() const override {
    if (config_.momentum == 0.0) return {};
    return {{"momentum_buffer", &momentum_buffer_}};
  }

  FlatParameters momentum_buffer_;
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout,
                                    int first_segment, int last_segment, OptimizerShard shard) {
  return std::make_unique<Sgd>(config, std::move(layout), first_segment, last_segment, std::move(shard));
}

}  // namespace vitpipe
