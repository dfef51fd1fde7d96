// LAMB as NVIDIA apex's FusedLAMB computes it (optimizer.h has the formula). Two passes, because the trust ratio
// needs whole-tensor norms before any element is updated: pass 1 updates m and v and sums ||p||^2 and ||u||^2 per
// piece; pass 2 recomputes u from the new m, v (the same float operations, so the same u) and applies it. This
// streams p, g, m, v, then p, m, v, instead of keeping a u buffer as large as the parameters.
#include <cmath>

#include "train/optimizer_kinds.h"

namespace vitpipe {
namespace {

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
void lamb_moments(const float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
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
void lamb_apply(float* __restrict p, const float* __restrict m, const float* __restrict v, int64_t n,
                const LambScalars s, float step) {
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] - step * lamb_direction(p[i], m[i], v[i], s);
}

class Lamb final : public Optimizer {
 public:
  Lamb(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout, int first, int last,
       OptimizerShard shard)
      : Optimizer(config, std::move(layout), first, last, std::move(shard)),
        exp_avg_(make_buffer()),
        exp_avg_sq_(make_buffer()) {
    piece_sums_.resize(plan_.pieces().size());
    trust_ratio_.resize(plan_.params().size());
  }

 private:
  void update(float* params, const float* grads, double lr) override {
    const double t = static_cast<double>(step_count_);
    LambScalars base;
    base.beta1 = static_cast<float>(config_.beta1);
    base.one_minus_beta1 = static_cast<float>(1.0 - config_.beta1);
    base.beta2 = static_cast<float>(config_.beta2);
    base.one_minus_beta2 = static_cast<float>(1.0 - config_.beta2);
    base.bias_correction1 = static_cast<float>(config_.bias_correction ? 1.0 - std::pow(config_.beta1, t) : 1.0);
    base.bias_correction2 = static_cast<float>(config_.bias_correction ? 1.0 - std::pow(config_.beta2, t) : 1.0);
    base.eps = static_cast<float>(config_.eps);
    auto scalars = [&](const UpdateParam& param) {
      LambScalars s = base;
      s.decay = static_cast<float>(param.decays ? config_.weight_decay : 0.0);
      return s;
    };
    float* m = exp_avg_.data();
    float* v = exp_avg_sq_.data();

    plan_.for_each_piece([&](int64_t index, const UpdatePiece& piece) {
      const int64_t b = piece.begin;
      PieceSums& sums = piece_sums_[static_cast<size_t>(index)];
      lamb_moments(params + b, grads + b, m + b, v + b, piece.end - b,
                   scalars(plan_.params()[static_cast<size_t>(piece.param)]), &sums.p, &sums.u);
    });

    std::vector<double> p_norm(plan_.params().size(), 0.0), u_norm(plan_.params().size(), 0.0);
    for (size_t i = 0; i < plan_.pieces().size(); ++i) {
      const size_t param = static_cast<size_t>(plan_.pieces()[i].param);
      p_norm[param] += piece_sums_[i].p;
      u_norm[param] += piece_sums_[i].u;
    }
    sum_across_shards(p_norm, u_norm);  // sharded: a tensor's other pieces live on other replicas
    for (size_t i = 0; i < trust_ratio_.size(); ++i) {
      const double pn = std::sqrt(p_norm[i]), un = std::sqrt(u_norm[i]);
      trust_ratio_[i] = plan_.params()[i].decays && pn > 0.0 && un > 0.0 ? pn / un : 1.0;
    }

    plan_.for_each_piece([&](int64_t, const UpdatePiece& piece) {
      const UpdateParam& param = plan_.params()[static_cast<size_t>(piece.param)];
      const float step = static_cast<float>(lr * param.lr_scale * trust_ratio_[static_cast<size_t>(piece.param)]);
      const int64_t b = piece.begin;
      lamb_apply(params + b, m + b, v + b, piece.end - b, scalars(param), step);
    });
  }

  std::vector<std::pair<std::string, const FlatParameters*>> buffers() const override {
    return {{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}};
  }

  struct PieceSums {
    double p = 0.0;
    double u = 0.0;
  };
  FlatParameters exp_avg_;
  FlatParameters exp_avg_sq_;
  std::vector<PieceSums> piece_sums_;
  std::vector<double> trust_ratio_;
};

}  // namespace

std::unique_ptr<Optimizer> make_lamb(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout,
                                     int first_segment, int last_segment, OptimizerShard shard) {
  return std::make_unique<Lamb>(config, std::move(layout), first_segment, last_segment, std::move(shard));
}

}  // namespace vitpipe
