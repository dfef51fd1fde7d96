// Optimizers over one pipeline stage's flat parameter range (model/parameter_layout.h): parameters, gradients and
// every moment buffer are FlatParameters of the same segments, so an update is one streaming pass over a few
// contiguous arrays, OpenMP-parallel over fixed chunks (see optimizer_plan.h).
//
// Per parameter (from its ParamSpec): weight decay applies where spec.decays() (linear weights; not biases, norms,
// CLS token, position embeddings) unless `decay_all_parameters`; the learning rate of segment s is multiplied by
// layer_decay^(S-1-s) (S segments: the head gets 1, block L-1 gets layer_decay, the embeddings layer_decay^(L+1),
// as BEiT/MAE fine-tuning does).
//
// The exact update rules:
//   adamw (torch.optim.AdamW):  p *= 1 - lr*wd;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;
//                               p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)  with bc_i = 1 - b_i^t, t = 1, 2, ...
//   adamw-nobc:                 the same with bc1 = bc2 = 1 (BERT's AdamW; transformers' AdamW(correct_bias=False)
//                               differs only in decaying after instead of before the update).
//   lamb (NVIDIA apex FusedLAMB, adam_w_mode, grad_averaging; no internal clipping):
//                               m, v as adamw;  u = (m/bc1) / (sqrt(v/bc2) + eps) + wd*p;
//                               r = ||p|| / ||u|| over the whole parameter tensor (before the update, in double),
//                                   r = 1 when either norm is 0 or the parameter does not decay (biases, norms,
//                                   tokens: apex's wd = 0 group);
//                               p -= lr * r * u.
//   sgd (torch.optim.SGD):      d = g + wd*p;  buf = d on the first step, else buf = mu*buf + (1-dampening)*d;
//                               d = nesterov ? d + mu*buf : buf (when mu != 0);  p -= lr*d.
// Arithmetic is fp32 per element with per-step scalars computed in double, as torch does.
//
// The elementwise work runs behind the Backend (backend.h: adamw_update, lamb_moments, lamb_update, sgd_update), so
// parameters, gradients and the moment buffers may be device memory: the optimizer itself only computes the per-step
// scalars and the per-run table (one run per UpdatePlan piece) on the host, and LAMB's per-tensor norms come back as
// doubles. The moment buffers are allocated (zeroed) in the backend's memory from the start (Backend::allocate).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/named_tensors.h"
#include "model/parameter_layout.h"
#include "train/optimizer_plan.h"

namespace vitpipe {

enum class OptimizerKind { adamw, lamb, sgd };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  bool bias_correction = true;  // adamw and lamb
  double weight_decay = 0.0;
  bool decay_all_parameters = false;  // decay (and LAMB's trust ratio) on every parameter, not only spec.decays()
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0.0;  // sgd
  double dampening = 0.0;
  bool nesterov = false;
  double layer_decay = 1.0;  // 1 = off

  // "adamw", "adamw-nobc", "lamb", "lamb-nobc", "sgd".
  std::string name() const;
  // Throws vitpipe::Error naming the field for a value out of range.
  void validate() const;
};

// ZeRO stage 1: an optimizer that owns elements [begin, end) (model offsets) of its segment range; its moments cover
// only those, and it updates only them. `sum_across_shards` adds, in place, per-tensor partial sums over every shard
// of the range (LAMB's whole-tensor norms: a tensor may straddle shards); the data-parallel group's all-reduce.
struct OptimizerShard {
  int64_t begin = -1;  // -1: the whole segment range (not sharded)
  int64_t end = -1;
  std::function<void(std::span<double>)> sum_across_shards;
  bool sharded() const { return begin >= 0; }
};

// The config of a named optimizer with default hyper-parameters; throws listing the known names.
OptimizerConfig optimizer_config_named(const std::string& name);
const std::vector<std::string>& optimizer_names();

// The learning-rate factor of each segment for a layer-wise decay (all 1 when layer_decay is 1).
std::vector<double> layer_lr_scales(int num_segments, double layer_decay);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update: `params` -= f(grads) with learning rate `lr` (before the layer-wise factor). Both must be of this
  // optimizer's segment range and hold its elements (a shard updates its slice only).
  void step(FlatParameters& params, const FlatParameters& grads, double lr);

  const OptimizerConfig& config() const { return config_; }
  int64_t step_count() const { return step_count_; }
  int first_segment() const { return first_; }
  int last_segment() const { return last_; }
  int64_t range_begin() const { return range_begin_; }  // model offsets of the elements it updates
  int64_t range_end() const { return range_end_; }
  size_t state_bytes() const;  // bytes of its moment buffers

  // The backend that runs the updates (a stage's; host_backend() unless make_optimizer was given one).
  Backend& backend() const { return *backend_; }

  // Checkpointing. The tensors are views of the live buffers (no copy), each f32 [range numel]: "exp_avg",
  // "exp_avg_sq" (adamw, lamb), "momentum_buffer" (sgd with momentum); they are backend() memory, which the host
  // reads only through backend().copy_to_host (train/distributed_state.cpp). load_state copies in through
  // backend().copy_from_host. The metadata says what they cover:
  // "optimizer", "step", "first_segment", "last_segment", "begin", "numel", "model_numel".
  TensorMap state_tensors() const;
  StringMap state_metadata() const;
  // Copies a saved state in; refuses (naming what differs) another optimizer, another segment range or model,
  // a missing or misshapen tensor. `source` names the checkpoint in messages.
  void load_state(const TensorMap& tensors, const StringMap& metadata, const std::string& source = "optimizer state");

 protected:
  Optimizer(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout, int first_segment,
            int last_segment, OptimizerShard shard, Backend* backend);
  // Called by step() after step_count() was incremented (so it is t = 1 on the first update).
  // `params` and `grads` are f32 [plan_.numel()]: the optimizer's elements.
  virtual void update(const Tensor& params, const Tensor& grads, double lr) = 0;
  // The backend arguments of one step over `params`, `grads` and up to two moment buffers, with runs_ as runs
  // and the plan's chunks as work items.
  OptimizerStep step_args(const Tensor& params, const Tensor& grads, const FlatParameters* exp_avg,
                          const FlatParameters* exp_avg_sq) const;
  // runs_ refilled: one run per plan piece, its decay and step from fn(param) -> std::pair<float, float>.
  template <class Fn>
  void fill_runs(Fn&& fn) {
    runs_.resize(plan_.pieces().size());
    for (size_t i = 0; i < runs_.size(); ++i) {
      const UpdatePiece& piece = plan_.pieces()[i];
      const auto [decay, step] = fn(plan_.params()[static_cast<size_t>(piece.param)]);
      runs_[i] = {piece.begin, piece.end, decay, step};
    }
  }
  // The named moment buffers (the state; FlatParameters is a handle, so const still lets load_state fill them).
  virtual std::vector<std::pair<std::string, const FlatParameters*>> buffers() const = 0;
  // A zeroed moment buffer in backend() memory.
  FlatParameters make_buffer() const {
    return FlatParameters(layout_, first_, last_, range_begin_, range_end_, backend_);
  }
  // Sharded: completes per-tensor partial sums (indexed like plan_.params()) over every shard; else nothing.
  void sum_across_shards(std::vector<double>& a, std::vector<double>& b) const;

  Backend* backend_ = nullptr;  // first: the subclasses' make_buffer() reads it while they are built
  OptimizerConfig config_;
  std::shared_ptr<const ParameterLayout> layout_;
  int first_;
  int last_;
  OptimizerShard shard_;
  int64_t range_begin_ = 0;
  int64_t range_end_ = 0;
  int64_t step_count_ = 0;
  UpdatePlan plan_;
  std::vector<OptimizerRun> runs_;

  friend std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig&, std::shared_ptr<const ParameterLayout>, int,
                                                   int, OptimizerShard, Backend*);
};

// `backend` runs the updates (and holds the parameters, gradients and moments: a stage's backend); null: the
// host_backend(), for host FlatParameters.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout,
                                          int first_segment, int last_segment, OptimizerShard shard = {},
                                          Backend* backend = nullptr);
// For the range `like` holds.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, const FlatParameters& like,
                                          OptimizerShard shard = {}, Backend* backend = nullptr);

}  // namespace vitpipe
