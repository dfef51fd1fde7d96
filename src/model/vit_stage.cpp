#include "model/vit_stage.h"

#include "model/classifier_head.h"
#include "model/classifier_token_block.h"
#include "model/embeddings.h"
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
  const ViTConfig& c = config();
  const int layers = static_cast<int>(c.num_hidden_layers);
  first_block_ = std::max(options_.first_segment, 1) - 1;
  const int last_block = std::min(options_.last_segment, layers) - 1;
  num_blocks_ = std::max(0, last_block - first_block_ + 1);
  if (!has_embeddings() && num_blocks_ == 0 && !has_head()) fail("a stage must hold at least one segment");
  classifier_token_block_ = has_head() && num_blocks_ > 0;

  parameters_ = FlatParameters(layout_, options_.first_segment, options_.last_segment);
  gradients_ = FlatParameters(layout_, options_.first_segment, options_.last_segment);
  if (options_.precision != Precision::fp32) {
    gemm_copy_ = Tensor::zeros({parameters_.numel()}, compute_dtype(options_.precision));
  }

  const int64_t b = options_.max_micro_batch;
  const DType act = compute_dtype(options_.precision);
  const bool save_blocks = options_.training && !options_.recompute;
  auto hidden = [&] {
    Tensor t = Tensor::empty({b * c.tokens(), c.hidden_size});
    activation_bytes_ += t.nbytes();
    return t;
  };
  // Forward-only stages keep just each slot's input and output; the hidden states in between ping-pong between
  // two shared buffers (a slot's forward pass runs start to finish before the next one begins).
  Tensor ping, pong;
  if (!options_.training && num_blocks_ > 1) {
    ping = hidden();
    pong = hidden();
  }
  slots_.resize(static_cast<size_t>(options_.slots));
  for (Slot& slot : slots_) {
    if (has_embeddings()) {
      slot.images = Tensor::empty({b, c.num_channels, c.image_size, c.image_size});
      slot.embeddings = EmbeddingActivations::allocate(c, b, act);
      activation_bytes_ += slot.images.nbytes() + slot.embeddings.bytes();
    }
    for (int i = 0; i <= num_blocks_; ++i) {
      const bool boundary = i == 0 || i == num_blocks_;
      if (i == num_blocks_ && classifier_token_block_) {
        slot.residual.emplace_back();  // the final block writes token 0 straight into the head's input
      } else {
        slot.residual.push_back(options_.training || boundary ? hidden() : (i % 2 ? ping : pong));
      }
    }
    if (save_blocks) {
      for (int i = 0; i < num_blocks_; ++i) {
        slot.blocks.push_back(BlockActivations::allocate(c, b, act));
        activation_bytes_ += slot.blocks.back().bytes();
      }
    }
    if (has_head()) {
      slot.head = HeadActivations::allocate(c, b);
      activation_bytes_ += slot.head.bytes();
    }
    if (options_.training) {
      slot.grad = Tensor::empty({b * c.tokens(), c.hidden_size});
      activation_bytes_ += slot.grad.nbytes();
    }
    if (options_.split_backward) {
      for (int i = 0; i < num_blocks_; ++i) {
        slot.deferred.blocks.push_back(BlockWeightGradientInputs::allocate(c, b, act, is_classifier_token_block(i)));
      }
      if (has_embeddings()) slot.deferred.patches = Tensor::empty({b * c.num_patches(), c.hidden_size}, act);
      activation_bytes_ += slot.deferred.bytes();
    }
  }
  if (num_blocks_ > 0 && !save_blocks) {
    workspace_ = BlockActivations::allocate(c, b, act);
    activation_bytes_ += workspace_.bytes();
  }
  if (options_.training) {
    grad_workspace_ = GradientWorkspace::allocate(c, b, act, has_embeddings());
    activation_bytes_ += grad_workspace_.bytes();
  }
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
  const int64_t begin = layout_->segment_begin(first_segment) - parameters_.begin();
  const int64_t end = layout_->segment_end(last_segment) - parameters_.begin();
  backend_.convert(parameters_.flat().slice(begin, end), gemm_copy_.slice(begin, end));
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
  const Tensor& values = parameters_.flat();
  const Tensor& gemm_values = gemm_copy_.numel() ? gemm_copy_ : values;
  const int64_t begin = parameters_.begin();
  if (has_embeddings()) {
    if (before_segment) before_segment(0);
    embeddings_forward(ctx, embedding_parameters(*layout_, values, begin),
                       embedding_parameters(*layout_, gemm_values, begin), s.images.slice(0, batch),
                       s.embeddings.rows_for(c, batch),
                       residual(slot, 0, batch).view({batch, c.tokens(), c.hidden_size}));
  }
  const HeadActivations head = has_head() ? s.head.rows_for(c, batch) : HeadActivations{};
  for (int i = 0; i < num_blocks_; ++i) {
    const int block = first_block_ + i;
    if (before_segment) before_segment(block + 1);
    const BlockActivations& saved = s.blocks.empty() ? workspace_ : s.blocks[i];
    const BlockParameters w = block_parameters(*layout_, block, values, begin);
    const BlockParameters gw = block_parameters(*layout_, block, gemm_values, begin);
    if (is_classifier_token_block(i)) {
      classifier_token_block_forward(ctx, w, gw, residual(slot, i, batch), saved.classifier_token_rows(c, batch),
                                     &head.cls);
    } else {
      const Tensor out = residual(slot, i + 1, batch);
      encoder_block_forward(ctx, w, gw, residual(slot, i, batch), saved.rows_for(c, batch), &out);
    }
  }
  if (has_head()) {
    if (before_segment) before_segment(options_.last_segment);
    if (!classifier_token_block_) {
      backend_.gather_cls(residual(slot, num_blocks_, batch).view({batch, c.tokens(), c.hidden_size}), head.cls);
    }
    head_forward(ctx, head_parameters(*layout_, values, begin), head);
  }
}

double ViTStage::loss(int slot, int64_t batch, const Tensor& targets, double grad_scale, const Tensor* pos_weight,
                      const Tensor* weights) {
  VP_REQUIRE(has_head(), "loss() is computed by the stage holding the head");
  return head_loss(context(), slots_.at(static_cast<size_t>(slot)).head.rows_for(config(), batch), targets, grad_scale,
                   pos_weight, weights);
}

void ViTStage::set_output_gradient(int slot, int64_t batch, const Tensor& grad_logits) {
  VP_REQUIRE(has_head() && options_.training, "set_output_gradient() needs the training stage holding the head");
  const Tensor target = slots_.at(static_cast<size_t>(slot)).head.rows_for(config(), batch).grad_logits;
  VP_REQUIRE(grad_logits.shape() == target.shape(), "output gradient shape mismatch");
  target.copy_from(grad_logits);
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
  const Tensor& grads = gradients_.flat();
  const int64_t begin = parameters_.begin();
  // Last segment first, as backward(): the gradient buckets of the end of the range can start first.
  if (has_head()) {
    head_weight_gradients(ctx, head_parameters(*layout_, grads, begin), s.head.rows_for(c, batch));
    if (segment_done) segment_done(options_.last_segment);
  }
  for (int i = num_blocks_ - 1; i >= 0; --i) {
    const BlockActivations& saved = s.blocks[static_cast<size_t>(i)];
    const BlockActivations acts =
        is_classifier_token_block(i) ? saved.classifier_token_rows(c, batch) : saved.rows_for(c, batch);
    block_weight_gradients(ctx, block_parameters(*layout_, first_block_ + i, grads, begin), acts,
                           deferred_rows(slot, i, batch));
    if (segment_done) segment_done(first_block_ + i + 1);
  }
  if (has_embeddings()) {
    embeddings_weight_gradients(ctx, embedding_parameters(*layout_, grads, begin), s.embeddings.rows_for(c, batch),
                                s.deferred.patches.slice(0, batch * c.num_patches()));
    if (segment_done) segment_done(0);
  }
}

void ViTStage::backward_pass(int slot, int64_t batch, const std::function<void(int segment)>& segment_done,
                             bool split) {
  VP_REQUIRE(options_.training, "backward() needs a training stage");
  const ViTConfig& c = config();
  const LayerContext ctx = context();
  const Slot& s = slots_.at(static_cast<size_t>(slot));
  const Tensor& values = parameters_.flat();
  const Tensor& gemm_values = gemm_copy_.numel() ? gemm_copy_ : values;
  const Tensor& grads = gradients_.flat();
  const int64_t begin = parameters_.begin();
  const GradientWorkspace ws = grad_workspace_.rows_for(c, batch);
  const Tensor grad = s.grad.slice(0, batch * c.tokens());
  const bool low = ctx.low_precision();
  const Tensor grad_low = low ? ws.residual_low : grad;

  Tensor last_fc2_bias;
  if (num_blocks_ > 0) {
    last_fc2_bias = block_parameters(*layout_, first_block_ + num_blocks_ - 1, grads, begin).fc2_bias;
  }
  const HeadActivations head = has_head() ? s.head.rows_for(c, batch) : HeadActivations{};
  // bf16: the act-dtype copy of the head's input gradient, for the final block's GEMMs.
  const Tensor grad_cls_low = low ? ws.residual_low.slice(0, batch) : head.grad_cls;
  // Split: the last block's output gradient goes (in the act dtype) straight to where its W will read it.
  const Tensor last_block_out_low =
      split && num_blocks_ > 0 ? deferred_rows(slot, num_blocks_ - 1, batch).fc2_out : Tensor();
  if (has_head()) {
    const Tensor* low_copy = split && num_blocks_ > 0 ? &last_block_out_low
                             : low && num_blocks_ > 0 ? &grad_cls_low
                                                      : nullptr;
    head_backward(ctx, head_parameters(*layout_, values, begin), head_parameters(*layout_, grads, begin), head,
                  low_copy, num_blocks_ > 0 ? &last_fc2_bias : nullptr, split);
    if (num_blocks_ == 0) backend_.scatter_cls(head.grad_cls, grad.view({batch, c.tokens(), c.hidden_size}));
    if (segment_done) segment_done(options_.last_segment);
  } else if (num_blocks_ > 0) {
    // The gradient arrived from the next stage: the fused column sums and bf16 copy happen here instead.
    backend_.bias_backward(grad, last_fc2_bias);
    if (split) {
      backend_.convert(grad, last_block_out_low);
    } else if (low) {
      backend_.convert(grad, grad_low);
    }
  }
  for (int i = num_blocks_ - 1; i >= 0; --i) {
    const int block = first_block_ + i;
    const BlockParameters w = block_parameters(*layout_, block, values, begin);
    const BlockParameters gw = block_parameters(*layout_, block, gemm_values, begin);
    const BlockParameters g = block_parameters(*layout_, block, grads, begin);
    const Tensor input = residual(slot, i, batch);
    const bool classifier_token = is_classifier_token_block(i);
    const BlockActivations& saved = s.blocks.empty() ? workspace_ : s.blocks[i];
    const BlockActivations acts = classifier_token ? saved.classifier_token_rows(c, batch) : saved.rows_for(c, batch);
    if (s.blocks.empty()) {  // recomputation
      if (classifier_token) {
        classifier_token_block_forward(ctx, w, gw, input, acts, nullptr);
      } else {
        encoder_block_forward(ctx, w, gw, input, acts, nullptr);
      }
    }
    Tensor previous_bias;
    if (i > 0) previous_bias = block_parameters(*layout_, block - 1, grads, begin).fc2_bias;
    BlockWeightGradientInputs deferred;
    Tensor previous_out_low;  // split: the previous block's W input, written by this block's last LayerNorm
    if (split) {
      deferred = deferred_rows(slot, i, batch);
      if (i > 0) previous_out_low = deferred_rows(slot, i - 1, batch).fc2_out;
    }
    if (classifier_token) {
      ClassifierTokenGradientFlow flow;
      flow.grad_cls = head.grad_cls;
      flow.grad_cls_low = grad_cls_low;
      flow.grad = grad;
      flow.grad_low = grad_low;
      flow.need_low_on_exit = i > 0;
      flow.previous_fc2_bias_grad = i > 0 ? &previous_bias : nullptr;
      flow.deferred = split ? &deferred : nullptr;
      flow.grad_low_on_exit = previous_out_low;
      classifier_token_block_backward(ctx, w, gw, g, input, acts, ws, flow);
    } else {
      BlockGradientFlow flow;
      flow.grad = grad;
      flow.grad_low = grad_low;
      flow.need_low_on_exit = i > 0;
      flow.previous_fc2_bias_grad = i > 0 ? &previous_bias : nullptr;
      flow.deferred = split ? &deferred : nullptr;
      flow.grad_low_on_exit = previous_out_low;
      encoder_block_backward(ctx, w, gw, g, input, acts, ws, flow);
    }
    if (block_observer_) {
      const int64_t rows = classifier_token ? batch : batch * c.tokens();
      block_observer_(BlockGradients{block, classifier_token, &acts, ws.attention.slice(0, rows),
                                     ws.ln.slice(0, batch * c.tokens()), grad});
    }
    // Block i's fc2 bias gradient was completed by block i+1's backward (or above); the rest just now.
    if (segment_done) segment_done(block + 1);
  }
  if (has_embeddings()) {
    const Tensor deferred_patches = split ? s.deferred.patches.slice(0, batch * c.num_patches()) : Tensor();
    embeddings_backward(ctx, embedding_parameters(*layout_, grads, begin), s.embeddings.rows_for(c, batch),
                        grad.view({batch, c.tokens(), c.hidden_size}), ws, split ? &deferred_patches : nullptr);
    if (segment_done) segment_done(0);
  }
}

}  // namespace vitpipe
