// A contiguous range of the model's segments (embeddings, blocks, head) with its parameters, gradients and memory
// plan: what one pipeline stage runs. The whole model is the stage holding every segment.
//
// Micro-batches live in "slots" (1F1B keeps at most P in flight, GPipe m): a slot holds the activations the
// backward pass of its micro-batch needs. The executor fills input(slot) (images or received hidden states), calls
// forward, reads output(slot); for backward it fills grad(slot) (non-last stages) or calls loss (last stage), calls
// backward, and (non-first stages) sends grad(slot), which then holds the gradient w.r.t. the input.
//
// Trainable subsets (model/trainable_set.h): the stage's trainable parameters, their gradients (and whatever an
// optimizer keeps) live in buffers of the trainable layout; the frozen ones in a buffer of their own. Blocks below
// the lowest trained segment run forward only (inference buffers, nothing kept), and the backward pass stops where
// nothing below it trains; a stage with nothing to train leaves grad(slot) as it is.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/activations.h"
#include "model/block_parameters.h"
#include "model/embeddings.h"
#include "model/layer_context.h"
#include "model/parameter_layout.h"
#include "model/trainable_set.h"
#include "model/weight_gradients.h"

namespace vitpipe {

struct StageOptions {
  int first_segment = 0;
  int last_segment = -1;  // -1 = the last segment (head)
  Precision precision = Precision::fp32;
  bool training = true;    // false: forward only, no saved activations
  bool recompute = false;  // keep only each block's input; recompute the rest in the backward pass
  // Backward split into backward_input (B) and backward_weight (W) for ZB-H1: each slot also keeps what W reads
  // (model/weight_gradients.h) until W runs. Not with recompute (W reads the activations recompute discards).
  bool split_backward = false;
  int64_t max_micro_batch = 1;
  int slots = 1;
  std::shared_ptr<const TrainableSplit> split;  // null: every parameter the forward pass reads trains
};

class ViTStage {
 public:
  // `layout`: the whole model's (full) layout; options.split, when given, must have been made from it.
  ViTStage(std::shared_ptr<const ParameterLayout> layout, Backend& backend, StageOptions options);

  const ViTConfig& config() const { return layout_->config(); }
  const StageOptions& options() const { return options_; }
  const TrainableSplit& split() const { return *split_; }
  bool has_embeddings() const { return options_.first_segment == 0; }
  bool has_head() const { return options_.last_segment == layout_->num_segments() - 1; }
  int first_block() const { return first_block_; }
  int num_blocks() const { return num_blocks_; }

  // The trainable parameters (what optimizers step and checkpoints hold), in the trainable layout.
  // The backend holding this stage's parameters, gradients and activations (device memory on a GPU): the host reads
  // or writes them only through its copy_to_host / copy_from_host.
  Backend& backend() const { return backend_; }
  FlatParameters& parameters() { return parameters_; }
  const FlatParameters& parameters() const { return parameters_; }
  const FlatParameters& frozen_parameters() const { return frozen_; }
  FlatParameters& gradients() { return gradients_; }
  void zero_gradients() { backend_.zero(gradients_.flat()); }  // through the backend: gradients are device memory
  // Refreshes the bf16 copy of the trainable weights; call after they change (no-op in fp32).
  void parameters_changed();
  void parameters_changed(int first_segment, int last_segment);  // the same for part of the range
  // Copies this stage's parameters, trainable and frozen, from `whole` (any layout holding their names, e.g. a
  // loaded model's) and refreshes the bf16 copies.
  void load_values(const FlatParameters& whole);

  // These three are the backend's memory: the host fills and reads them through backend().copy_from_host /
  // copy_to_host (or directly where backend().host_accessible()).
  Tensor input(int slot, int64_t batch) const;   // images [b, C, S, S] or hidden [b, T, D]
  Tensor output(int slot, int64_t batch) const;  // logits [b, L] (last stage) or hidden [b, T, D]
  Tensor grad(int slot, int64_t batch) const;    // [b, T, D] f32, see above

  // `before_segment` (optional) is called before each segment is computed, first segment first: the executor waits
  // there for a sharded optimizer's gathered parameters (parallel/parameter_gather.h).
  void forward(int slot, int64_t batch, const std::function<void(int segment)>& before_segment = {});
  // targets, pos_weight and weights in host memory.
  double loss(int slot, int64_t batch, const Tensor& targets, double grad_scale, const Tensor* pos_weight = nullptr,
              const Tensor* weights = nullptr);
  // `segment_done` (optional) is called as each segment's parameter gradients for this micro-batch are complete,
  // last segment first: the executor starts the gradient all-reduce of finished buckets while the rest runs.
  void backward(int slot, int64_t batch, const std::function<void(int segment)>& segment_done = {});
  // The same split in two (split_backward stages): B writes grad(slot) (the gradient w.r.t. the input) and the bias,
  // LayerNorm, LayerScale and embedding-token gradients; W adds the weight GEMMs' and LoRA matrices' gradients, after
  // which the slot's parameter gradients equal backward()'s. `segment_done` as backward()'s, called by W (each
  // segment is final once its weights are).
  void backward_input(int slot, int64_t batch);
  void backward_weight(int slot, int64_t batch, const std::function<void(int segment)>& segment_done = {});

  // For explanations (explain/): the gradient at the logits set directly instead of by loss(), and a look at each
  // block's saved activations and gradient workspace right after its backward pass (block = index in the model).
  void set_output_gradient(int slot, int64_t batch, const Tensor& grad_logits);
  struct BlockGradients {
    int block = 0;
    bool classifier_token_only = false;  // the final block: lse [b, H] and grad_attention [b, D] for token 0
    const BlockActivations* saved = nullptr;
    Tensor grad_attention;  // at the attention output, before the projection: [rows, D] (or [b, D])
    Tensor grad_ln1;        // at the first LayerNorm's output: [rows, D]
    Tensor grad_input;      // at the block input (the residual stream): [rows, D] f32
  };
  void set_block_gradient_observer(std::function<void(const BlockGradients&)> observer) {
    block_observer_ = std::move(observer);
  }

  // Bytes of activations and gradient workspace this stage allocated (the memory plan).
  size_t activation_bytes() const { return activation_bytes_; }

 private:
  struct Slot {
    Tensor images;
    std::vector<Tensor> residual;          // num_blocks + 1 tensors [b * T, D] f32
    std::vector<BlockActivations> blocks;  // per block on the backward path (empty for the others)
    EmbeddingActivations embeddings;
    HeadActivations head;
    Tensor grad;
    StageWeightGradientInputs deferred;  // split_backward only (blocks on the backward path; trained embeddings)
  };
  LayerContext context() const;
  ParameterViews value_views(bool gemm) const;
  ParameterViews gradient_views() const;
  // backward() when !split; backward_input() when split.
  void backward_pass(int slot, int64_t batch, const std::function<void(int segment)>& segment_done, bool split);
  BlockWeightGradientInputs deferred_rows(int slot, int index, int64_t batch) const;
  Tensor residual(int slot, int index, int64_t batch) const;
  // The stage's last block feeds a head that reads token 0 only: it computes token 0's output alone
  // (model/classifier_token_block.h).
  bool is_classifier_token_block(int index) const { return classifier_token_block_ && index == num_blocks_ - 1; }
  bool saves(int index) const;  // block `index` keeps its activations per slot
  const Tensor* trained(const Tensor& grad) const { return grad.numel() ? &grad : nullptr; }

  std::shared_ptr<const ParameterLayout> layout_;
  std::shared_ptr<const TrainableSplit> split_;
  Backend& backend_;
  StageOptions options_;
  int first_block_ = 0;
  int num_blocks_ = 0;
  int first_backward_block_ = 0;    // local index: blocks below it run forward only
  bool embeddings_train_ = false;   // this stage holds the embeddings and they train
  bool input_grad_needed_ = false;  // an earlier stage trains: grad(slot) must hold the input's gradient
  bool classifier_token_block_ = false;
  FlatParameters parameters_;
  FlatParameters frozen_;
  FlatParameters gradients_;
  Tensor gemm_copy_, frozen_gemm_copy_;  // bf16 copies of the two value buffers (bf16 only)
  // loss()'s labels in the backend's memory (a head stage on a backend the host cannot reach): multi-label targets
  // [b, L] f32, class ids [b] i64, per-label weights [b, L], pos_weight [L].
  Tensor label_values_, label_ids_, label_weights_, pos_weight_;
  PositionResampling resampling_;
  std::vector<Slot> slots_;
  BlockActivations workspace_;  // inference, frozen blocks and recomputation
  GradientWorkspace grad_workspace_;
  size_t activation_bytes_ = 0;
  std::function<void(const BlockGradients&)> block_observer_;
};

}  // namespace vitpipe
