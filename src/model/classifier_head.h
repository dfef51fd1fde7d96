// Final LayerNorm and classifier on the CLS token only (ViTForImageClassification ignores the pooler), and the
// loss. The final LayerNorm runs on CLS rows alone: other tokens never reach the logits, so their gradient is 0.
#pragma once

#include "model/activations.h"
#include "model/block_parameters.h"
#include "model/layer_context.h"

namespace vitpipe {

// Reads saved.cls ([b, D] f32, the final hidden state of token 0): the final encoder block writes it directly
// (model/classifier_token_block.h), or the stage gathers it from [b, T, D] hidden states it received.
void head_forward(const LayerContext& ctx, const HeadParameters& weights, const HeadActivations& saved);

// Multi-label: targets [b, L] f32 (0/1), BCE-with-logits, `weights` (optional [b, L] f32: 0 masks a label out);
// single-label: targets [b] int64, cross-entropy. Returns the loss summed over the micro-batch's elements (weighted);
// grad_scale turns it into the mean over the global batch.
double head_loss(const LayerContext& ctx, const HeadActivations& saved, const Tensor& targets, double grad_scale,
                 const Tensor* pos_weight, const Tensor* weights = nullptr);

// saved.grad_cls [b, D] f32 receives the gradient w.r.t. saved.cls. grad_cls_low (optional) gets an act-dtype
// copy; last_fc2_bias_grad (optional) the column sums (the last block's fc2 bias gradient). `defer_weight` (split
// backward) leaves the classifier's weight GEMM to head_weight_gradients (model/weight_gradients.h).
void head_backward(const LayerContext& ctx, const HeadParameters& weights, const HeadParameters& grads,
                   const HeadActivations& saved, const Tensor* grad_cls_low, const Tensor* last_fc2_bias_grad,
                   bool defer_weight = false);

}  // namespace vitpipe
