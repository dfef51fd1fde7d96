#include "model/vit_stage.h"

#include <algorithm>

#include "model/classifier_head.h"
#include "model/classifier_token_block.h"
#include "model/encoder_block.h"
#include "util/error.h"

namespace vitpipe {

ViTStage::ViTStage(std::shared_ptr<const ParameterLayout> layout, Backend& backend, StageOptions options)
    : layout_(std::move(layout)), backend_(backend), options_(options) {
  const int segments = layout_->num_segments();
  if (options_.last_segment < 0) options_.last_segment = segments - 1;
  VP_REQUIRE(options_.first_segment >= 0 && options_.first_segment <= options_.last_segment &&
                 options_.last_segment < segments,
             "stage segments [", options_.first_segment, ", ", options_.last_segment, "] outside [0, ", segments - 1,
             "]");
  VP_REQUIRE(options_.max_micro_batch > 0 && options_.slots > 0, "stage needs a positive micro-batch and slot count");
  VP_REQUIRE(!options_.split_backward || (options_.training && !options_.recompute),
             "a split backward (zb-h1) needs a training stage without recomputation: its weight-gradient pass reads "
             "the activations --recompute discards");
  split_ = options_.split ? options_.split : full_training_split(layout_);
  VP_REQUIRE(split_->full.get() == layout_.get() || split_->full->specs().size() == layout_->specs().size(),
             "internal: the trainable split belongs to another layout");
  const ViTConfig& c = config();
  const int layers = static_cast<int>(c.num_hidden_layers);
  first_block_ = std::max(options_.first_segment, 1) - 1;
  const int last_block = std::min(options_.last_segment, layers) - 1;
  num_blocks_ = std::max(0, last_block - first_block_ + 1);
  if (!has_embeddings() && num_blocks_ == 0 && !has_head()) fail("a stage must hold at least one segment");
  classifier_token_block_ = has_head() && num_blocks_ > 0 && c.head_reads_token_zero_only();
  // Block b (global) is segment b + 1: the backward pass runs through it when it or a segment below trains.
  const int trained = split_->first_trained_segment;
  first_backward_block_ = options_.training ? std::clamp(trained - 1 - first_block_, 0, num_blocks_) : num_blocks_;
  embeddings_train_ = options_.training && has_embeddings() && trained == 0;
  input_grad_needed_ = options_.training && trained < options_.first_segment;

  // Parameters, gradients and the bf16 copies in the backend's memory (the GPU's for a CUDA stage).
  parameters_ = FlatParameters(split_->trainable, options_.first_segment, options_.last_segment, &backend_);
  frozen_ = FlatParameters(split_->frozen, options_.first_segment, options_.last_segment, &backend_);
  // Inference stages too: the executor's gradient buckets are laid out over every stage's gradient ranges.
  gradients_ = FlatParameters(split_->trainable, options_.first_segment, options_.last_segment, &backend_);
  if (options_.precision != Precision::fp32) {
    gemm_copy_ = allocate_zeros(backend_, {parameters_.numel()}, compute_dtype(options_.precision));
    frozen_gemm_copy_ = allocate_zeros(backend_, {frozen_.numel()}, compute_dtype(options_.precision));
  }
  if (has_embeddings()) resampling_ = PositionResampling::for_config(c).placed_on(backend_);

  const int64_t b = options_.max_micro_batch;
  const DType act = compute_dtype(options_.precision);
  auto hidden = [&] {
    Tensor t = backend_.allocate({b * c.tokens(), c.hidden_size}, DType::f32);
    activation_bytes_ += t.nbytes();
    return t;
  };
  // Hidden states only the forward pass reads (inference; blocks below the backward path) ping-pong between two
  // shared buffers: a slot's forward pass runs start to finish before the next one begins.
  auto per_slot = [&](int i) {
    return i == 0 || i == num_blocks_ || (options_.training && i >= first_backward_block_);
  };
  Tensor ping, pong;
  for (int i = 1; i < num_blocks_; ++i) {
    if (!per_slot(i) && ping.numel() == 0) {
      ping = hidden();
      pong = hidden();
    }
  }
  slots_.resize(static_cast<size_t>(options_.slots));
  for (Slot& slot : slots_) {
    if (has_embeddings()) {
      slot.images = backend_.allocate({b, c.num_channels, c.input_size(), c.input_size()}, DType::f32);
      slot.embeddings = EmbeddingActivations::allocate(backend_, c, b, act);
      activation_bytes_ += slot.images.nbytes() + slot.embeddings.bytes();
    }
    for (int i = 0; i <= num_blocks_; ++i) {
      if (i == num_blocks_ && classifier_token_block_) {
        slot.residual.emplace_back();  // the final block writes token 0 straight into the head's input
      } else {
        slot.residual.push_back(per_slot(i) ? hidden() : (i % 2 ? ping : pong));
      }
    }
    slot.blocks.resize(static_cast<size_t>(num_blocks_));
    for (int i = 0; i < num_blocks_; ++i) {
      if (!saves(i)) continue;
      slot.blocks[static_cast<size_t>(i)] = BlockActivations::allocate(backend_, c, layout_->lora(), b, act);
      activation_bytes_ += slot.blocks[static_cast<size_t>(i)].bytes();
    }
    if (has_head()) {
      slot.head = HeadActivations::allocate(backend_, c, b);
      activation_bytes_ += slot.head.bytes();
    }
    if (options_.training) {
      slot.grad = backend_.allocate({b * c.tokens(), c.hidden_size}, DType::f32);
      activation_bytes_ += slot.grad.nbytes();
    }
    if (options_.split_backward) {  // W's inputs, for what trains only
      slot.deferred.blocks.resize(static_cast<size_t>(num_blocks_));
      for (int i = first_backward_block_; i < num_blocks_; ++i) {
        slot.deferred.blocks[static_cast<size_t>(i)] =
            BlockWeightGradientInputs::allocate(backend_, c, b, act, is_classifier_token_block(i));
      }
      if (embeddings_train_) slot.deferred.patches = backend_.allocate({b * c.num_patches(), c.hidden_size}, act);
      activation_bytes_ += slot.deferred.bytes();
    }
  }
  bool shared_workspace = false;
  for (int i = 0; i < num_blocks_; ++i) shared_workspace |= !saves(i);
  if (shared_workspace) {
    workspace_ = BlockActivations::allocate(backend_, c, layout_->lora(), b, act);
    activation_bytes_ += workspace_.bytes();
  }
  if (options_.training && has_head() && !backend_.host_accessible()) {
    const int64_t labels = c.num_labels();
    label_values_ = backend_.allocate({b, labels}, DType::f32);
    label_ids_ = backend_.allocate({b}, DType::i64);
    label_weights_ = backend_.allocate({b, labels}, DType::f32);
    pos_weight_ = backend_.allocate({labels}, DType::f32);
  }
  if (options_.training) {
    grad_workspace_ = GradientWorkspace::allocate(backend_, c, b, act, embeddings_train_);
    activation_bytes_ += grad_workspace_.bytes();
  }
}

bool ViTStage::saves(int index) const {
  return options_.training && !options_.recompute && index >= first_backward_block_;
}

LayerContext ViTStage::context() const {
  LayerContext ctx{backend_, config(), options_.precision};
  if (layout_->lora().enabled()) ctx.lora_scale = layout_->lora().scale();
  ctx.inference = !options_.training;
  return ctx;
}

ParameterViews ViTStage::value_views(bool gemm) const {
  const bool copies = gemm && options_.precision != Precision::fp32;
  ParameterViews views;
  views.add(*split_->trainable, copies ? gemm_copy_ : parameters_.flat(), parameters_.begin());
  views.add(*split_->frozen, copies ? frozen_gemm_copy_ : frozen_.flat(), frozen_.begin());
  return views;
}

ParameterViews ViTStage::gradient_views() const {
  ParameterViews views;
  views.add(*split_->trainable, gradients_.flat(), gradients_.begin()).allow_missing();
  return views;
}

void ViTStage::parameters_changed() {
  if (gemm_copy_.numel() > 0) backend_.convert(parameters_.flat(), gemm_copy_);
}

void ViTStage::parameters_changed(int first_segment, int last_segment) {
  VP_REQUIRE(
      first_segment >= options_.first_segment && last_segment <= options_.last_segment && first_segment <= last_segment,
      "parameters_changed: segments [", first_segment, ", ", last_segment, "] outside the stage's [",
      options_.first_segment, ", ", options_.last_segment, "]");
  if (gemm_copy_.numel() == 0) return;
  const ParameterLayout& trainable = *split_->trainable;
  const int64_t begin = trainable.segment_begin(first_segment) - parameters_.begin();
  const int64_t end = trainable.segment_end(last_segment) - parameters_.begin();
  if (end > begin) backend_.convert(parameters_.flat().slice(begin, end), gemm_copy_.slice(begin, end));
}

namespace {

// copy_parameters(whole, held) where `held` is the backend's memory: through a host copy of it, so that elements
// `whole` does not name keep their values.
void copy_parameters_to_backend(Backend& backend, const FlatParameters& whole, const FlatParameters& held) {
  if (held.numel() == 0) return;
  FlatParameters staging(held.layout_ptr(), held.first_segment(), held.last_segment(), held.begin(),
                         held.begin() + held.numel());
  backend.copy_to_host(held.flat(), staging.flat());
  copy_parameters(whole, staging);
  backend.copy_from_host(staging.flat(), held.flat());
}

}  // namespace

void ViTStage::load_values(const FlatParameters& whole) {
  copy_parameters_to_backend(backend_, whole, parameters_);
  copy_parameters_to_backend(backend_, whole, frozen_);
  parameters_changed();
  if (frozen_gemm_copy_.numel() > 0) backend_.convert(frozen_.flat(), frozen_gemm_copy_);
}

Tensor ViTStage::residual(int slot, int index, int64_t batch) const {
  const ViTConfig& c = config();
  const Tensor& full = slots_.at(static_cast<size_t>(slot)).residual.at(static_cast<size_t>(index));
  return full.slice(0, batch * c.tokens());
}

Tensor ViTStage::input(int slot, int64_t batch) const {
  VP_REQUIRE(batch > 0 && batch <= options_.max_micro_batch, "micro-batch ", batch, " outside [1, ",
             options_.max_micro_batch, "]");
  const ViTConfig& c = config();
  if (has_embeddings()) return slots_.at(static_cast<size_t>(slot)).images.slice(0, batch);
  return residual(slot, 0, batch).view({batch, c.tokens(), c.hidden_size});
}

Tensor ViTStage::output(int slot, int64_t batch) const {
  const ViTConfig& c = config();
  if (has_head()) return slots_.at(static_cast<size_t>(slot)).head.rows_for(c, batch).logits;
  return residual(slot, num_blocks_, batch).view({batch, c.tokens(), c.hidden_size});
}

Tensor ViTStage::grad(int slot, int64_t batch) const {
  VP_REQUIRE(options_.training, "grad() needs a training stage");
  const ViTConfig& c = config();
  return slots_.at(static_cast<size_t>(slot))
      .grad.slice(0, batch * c.tokens())
      .view({batch, c.tokens(), c.hidden_size});
}

void ViTStage::forward(int slot, int64_t batch, const std::function<void(int segment)>& before_segment) {
  VP_REQUIRE(batch > 0 && batch <= options_.max_micro_batch, "micro-batch ", batch, " outside [1, ",
             options_.max_micro_batch, "]");
  const ViTConfig& c = config();
  const LayerContext ctx = context();
  const Slot& s = slots_.at(static_cast<size_t>(slot));
  const ParameterViews values = value_views(false), gemm_values = value_views(true);
  if (has_embeddings()) {
    if (before_segment) before_segment(0);
    embeddings_forward(ctx, embedding_parameters(values), embedding_parameters(gemm_values), resampling_,
                       s.images.slice(0, batch), s.embeddings.rows_for(c, batch),
                       residual(slot, 0, batch).view({batch, c.tokens(), c.hidden_size}));
  }
  const HeadActivations head = has_head() ? s.head.rows_for(c, batch) : HeadActivations{};
  for (int i = 0; i < num_blocks_; ++i) {
    const int block = first_block_ + i;
    if (before_segment) before_segment(block + 1);
    const BlockActivations& saved = saves(i) ? s.blocks[static_cast<size_t>(i)] : workspace_;
    const BlockParameters w = block_parameters(values, block);
    const BlockParameters gw = block_parameters(gemm_values, block);
    if (is_classifier_token_block(i)) {
      classifier_token_block_forward(ctx, w, gw, residual(slot, i, batch), saved.classifier_token_rows(c, batch),
                                     &head.tokens);
    } else {
      const Tensor out = residual(slot, i + 1, batch);
      encoder_block_forward(ctx, w, gw, residual(slot, i, batch), saved.rows_for(c, batch), &out);
    }
  }
  if (has_head()) {
    if (before_segment) before_segment(options_.last_segment);
    Tensor hidden;
    if (!classifier_token_block_) hidden = residual(slot, num_blocks_, batch);
    const Tensor tokens3 = hidden.numel() ? hidden.view({batch, c.tokens(), c.hidden_size}) : Tensor();
    if (c.head == HeadKind::cls_token && !classifier_token_block_) backend_.gather_cls(tokens3, head.tokens);
    if (c.head == HeadKind::cls_and_distillation) backend_.gather_tokens(tokens3, 2, head.tokens);
    head_forward(ctx, head_parameters(values), head, hidden);
  }
}

double ViTStage::loss(int slot, int64_t batch, const Tensor& targets, double grad_scale, const Tensor* pos_weight,
                      const Tensor* weights) {
  VP_REQUIRE(has_head(), "loss() is computed by the stage holding the head");
  if (backend_.host_accessible()) {
    return head_loss(context(), slots_.at(static_cast<size_t>(slot)).head.rows_for(config(), batch), targets,
                     grad_scale, pos_weight, weights);
  }
  // The labels arrive in host memory: into the backend's buffers (taken at construction) for the loss kernels.
  auto placed = [&](const Tensor& host, const Tensor& buffer) {
    VP_REQUIRE(host.dtype() == buffer.dtype() && host.numel() <= buffer.numel(), "loss: labels of shape ",
               shape_string(host.shape()), " (", dtype_name(host.dtype()), ") do not fit the stage's ",
               shape_string(buffer.shape()), " (", dtype_name(buffer.dtype()), ")");
    const Tensor view = buffer.view({buffer.numel()}).slice(0, host.numel()).view(host.shape());
    backend_.copy_from_host(host, view);
    return view;
  };
  const Tensor device_targets = placed(targets, targets.dtype() == DType::i64 ? label_ids_ : label_values_);
  Tensor device_pos_weight, device_weights;
  if (pos_weight != nullptr) device_pos_weight = placed(*pos_weight, pos_weight_);
  if (weights != nullptr) device_weights = placed(*weights, label_weights_);
  return head_loss(context(), slots_.at(static_cast<size_t>(slot)).head.rows_for(config(), batch), device_targets,
                   grad_scale, pos_weight != nullptr ? &device_pos_weight : nullptr,
                   weights != nullptr ? &device_weights : nullptr);
}

void ViTStage::set_output_gradient(int slot, int64_t batch, const Tensor& grad_logits) {
  VP_REQUIRE(has_head() && options_.training, "set_output_gradient() needs the training stage holding the head");
  const Tensor target = slots_.at(static_cast<size_t>(slot)).head.rows_for(config(), batch).grad_logits;
  VP_REQUIRE(grad_logits.shape() == target.shape(), "output gradient shape mismatch");
  backend_.copy_from_host(grad_logits, target);
}

void ViTStage::backward(int slot, int64_t batch, const std::function<void(int segment)>& segment_done) {
  backward_pass(slot, batch, segment_done, false);
}

void ViTStage::backward_input(int slot, int64_t batch) {
  VP_REQUIRE(options_.split_backward, "backward_input() needs a stage built with split_backward");
  backward_pass(slot, batch, {}, true);
}

BlockWeightGradientInputs ViTStage::deferred_rows(int slot, int index, int64_t batch) const {
  const BlockWeightGradientInputs& all =
      slots_.at(static_cast<size_t>(slot)).deferred.blocks.at(static_cast<size_t>(index));
  return is_classifier_token_block(index) ? all.classifier_token_rows(config(), batch) : all.rows_for(config(), batch);
}

void ViTStage::backward_weight(int slot, int64_t batch, const std::function<void(int segment)>& segment_done) {
  VP_REQUIRE(options_.split_backward, "backward_weight() needs a stage built with split_backward");
  const ViTConfig& c = config();
  const LayerContext ctx = context();
  const Slot& s = slots_.at(static_cast<size_t>(slot));
  const ParameterViews gemm_values = value_views(true), grads = gradient_views();
  // Last segment first, as backward(): the gradient buckets of the end of the range can start first. Segments
  // below the backward path (frozen) have nothing to do.
  if (has_head()) {
    head_weight_gradients(ctx, head_parameters(grads), s.head.rows_for(c, batch));
    if (segment_done) segment_done(options_.last_segment);
  }
  for (int i = num_blocks_ - 1; i >= 0; --i) {
    const int block = first_block_ + i;
    if (i >= first_backward_block_) {
      const BlockActivations& saved = s.blocks[static_cast<size_t>(i)];
      const BlockActivations acts =
          is_classifier_token_block(i) ? saved.classifier_token_rows(c, batch) : saved.rows_for(c, batch);
      block_weight_gradients(ctx, block_parameters(gemm_values, block), block_parameters(grads, block), acts,
                             deferred_rows(slot, i, batch));
    }
    if (segment_done) segment_done(block + 1);
  }
  if (has_embeddings()) {
    if (embeddings_train_) {
      embeddings_weight_gradients(ctx, embedding_parameters(grads), s.embeddings.rows_for(c, batch),
                                  s.deferred.patches.slice(0, batch * c.num_patches()));
    }
    if (segment_done) segment_done(0);
  }
}

void ViTStage::backward_pass(int slot, int64_t batch, const std::function<void(int segment)>& segment_done,
                             bool split) {
  VP_REQUIRE(options_.training, "backward() needs a training stage");
  const ViTConfig& c = config();
  const LayerContext ctx = context();
  const Slot& s = slots_.at(static_cast<size_t>(slot));
  const ParameterViews values = value_views(false), gemm_values = value_views(true), grads = gradient_views();
  const GradientWorkspace ws = grad_workspace_.rows_for(c, batch);
  const Tensor grad = s.grad.slice(0, batch * c.tokens());
  const Tensor grad3 = grad.view({batch, c.tokens(), c.hidden_size});
  const bool low = ctx.low_precision();
  const Tensor grad_low = low ? ws.residual_low : grad;
  const bool blocks_backward = first_backward_block_ < num_blocks_;

  // Without LayerScale the last block's fc2 bias gradient is the column sums of its output gradient, fused into
  // whichever kernel produces that gradient.
  Tensor last_fc2_bias;
  if (blocks_backward && !c.layer_scale) {
    last_fc2_bias = block_parameters(grads, first_block_ + num_blocks_ - 1).fc2_bias;
  }
  const Tensor* last_bias = trained(last_fc2_bias);
  const HeadActivations head = has_head() ? s.head.rows_for(c, batch) : HeadActivations{};
  // bf16: the act-dtype copy of the head's input gradient, for the final block's GEMMs.
  const Tensor grad_cls_low = low ? ws.residual_low.slice(0, batch) : head.grad_tokens;
  // Split, no LayerScale: the last block's act-dtype output gradient goes straight to where its W reads it (with
  // LayerScale the block makes it from the f32 gradient itself).
  const Tensor last_block_out_low =
      split && blocks_backward && !c.layer_scale ? deferred_rows(slot, num_blocks_ - 1, batch).fc2_out : Tensor();
  const bool to_deferred = last_block_out_low.numel() > 0;
  if (has_head()) {
    HeadGradientFlow flow;
    flow.defer_weight = split;
    flow.need_input_grad = blocks_backward || embeddings_train_ || input_grad_needed_;
    flow.scratch = ws.scratch;
    const bool to_block = blocks_backward;
    if (c.head == HeadKind::cls_token) {
      if (to_deferred) {
        flow.grad_tokens_low = &last_block_out_low;
      } else if (low && to_block) {
        flow.grad_tokens_low = &grad_cls_low;
      }
      if (to_block) flow.last_fc2_bias_grad = last_bias;
    } else if (c.head == HeadKind::cls_and_patch_mean) {
      flow.grad_hidden = grad;
      if (to_deferred) {
        flow.grad_hidden_low = &last_block_out_low;
      } else if (low && to_block) {
        flow.grad_hidden_low = &ws.residual_low;
      }
      if (to_block) flow.last_fc2_bias_grad = last_bias;
    }
    const Tensor hidden = classifier_token_block_ ? Tensor() : residual(slot, num_blocks_, batch);
    head_backward(ctx, head_parameters(values), head_parameters(grads), head, hidden, flow);
    if (flow.need_input_grad) {
      if (c.head == HeadKind::cls_token && !classifier_token_block_) backend_.scatter_cls(head.grad_tokens, grad3);
      if (c.head == HeadKind::cls_and_distillation) {
        backend_.scatter_tokens(head.grad_tokens, grad3);
        if (to_block && last_bias) backend_.bias_backward(grad, *last_bias);
        if (to_deferred) {
          backend_.convert(grad, last_block_out_low);
        } else if (to_block && low) {
          backend_.convert(grad, grad_low);
        }
      }
    }
    if (segment_done) segment_done(options_.last_segment);
  } else if (blocks_backward) {
    // The gradient arrived from the next stage: the fused column sums and bf16 copy happen here instead.
    if (last_bias) backend_.bias_backward(grad, *last_bias);
    if (to_deferred) {
      backend_.convert(grad, last_block_out_low);
    } else if (low) {
      backend_.convert(grad, grad_low);
    }
  }
  for (int i = num_blocks_ - 1; i >= 0; --i) {
    const int block = first_block_ + i;
    if (i >= first_backward_block_) {
      const BlockParameters w = block_parameters(values, block);
      const BlockParameters gw = block_parameters(gemm_values, block);
      const BlockParameters g = block_parameters(grads, block);
      const Tensor input = residual(slot, i, batch);
      const bool classifier_token = is_classifier_token_block(i);
      const BlockActivations& saved = saves(i) ? s.blocks[static_cast<size_t>(i)] : workspace_;
      const BlockActivations acts = classifier_token ? saved.classifier_token_rows(c, batch) : saved.rows_for(c, batch);
      if (!saves(i)) {  // recomputation
        if (classifier_token) {
          classifier_token_block_forward(ctx, w, gw, input, acts, nullptr);
        } else {
          encoder_block_forward(ctx, w, gw, input, acts, nullptr);
        }
      }
      // Below block i: another block of this stage on the backward path, the embeddings, or an earlier stage.
      const bool below_in_stage = i > first_backward_block_;
      const bool need_input = below_in_stage || (i == 0 && (embeddings_train_ || input_grad_needed_));
      Tensor previous_bias;
      if (below_in_stage && !c.layer_scale) previous_bias = block_parameters(grads, block - 1).fc2_bias;
      BlockWeightGradientInputs deferred;
      Tensor previous_out_low;  // split: the previous block's W input, written by this block's last LayerNorm
      if (split) {
        deferred = deferred_rows(slot, i, batch);
        if (below_in_stage && !c.layer_scale) previous_out_low = deferred_rows(slot, i - 1, batch).fc2_out;
      }
      if (classifier_token) {
        ClassifierTokenGradientFlow flow;
        flow.grad_cls = head.grad_tokens;
        flow.grad_cls_low = grad_cls_low;
        flow.grad = grad;
        flow.grad_low = grad_low;
        flow.need_low_on_exit = below_in_stage;
        flow.need_input_grad = need_input;
        flow.previous_fc2_bias_grad = trained(previous_bias);
        flow.deferred = split ? &deferred : nullptr;
        flow.grad_low_on_exit = previous_out_low;
        classifier_token_block_backward(ctx, w, gw, g, input, acts, ws, flow);
      } else {
        BlockGradientFlow flow;
        flow.grad = grad;
        flow.grad_low = grad_low;
        flow.need_low_on_exit = below_in_stage && !c.layer_scale;
        flow.need_input_grad = need_input;
        flow.previous_fc2_bias_grad = trained(previous_bias);
        flow.deferred = split ? &deferred : nullptr;
        flow.grad_low_on_exit = previous_out_low;
        encoder_block_backward(ctx, w, gw, g, input, acts, ws, flow);
      }
      if (block_observer_) {
        const int64_t rows = classifier_token ? batch : batch * c.tokens();
        block_observer_(BlockGradients{block, classifier_token, &acts, ws.attention.slice(0, rows),
                                       ws.ln.slice(0, batch * c.tokens()), grad});
      }
    }
    // Block i's fc2 bias gradient was completed by block i+1's backward (or above); the rest just now.
    if (segment_done) segment_done(block + 1);
  }
  if (has_embeddings()) {
    if (embeddings_train_) {
      const Tensor deferred_patches = split ? s.deferred.patches.slice(0, batch * c.num_patches()) : Tensor();
      embeddings_backward(ctx, embedding_parameters(grads), resampling_, s.embeddings.rows_for(c, batch), grad3, ws,
                          split ? &deferred_patches : nullptr);
    }
    if (segment_done) segment_done(0);
  }
}

}  // namespace vitpipe
