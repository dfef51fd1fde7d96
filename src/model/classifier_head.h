// Final LayerNorm and classifier on the CLS token only (ViTForImageClassification ignores the pooler), and the
// loss. The final LayerNorm runs on CLS rows alone: other tokens never reach the logits, so their gradient is 0.
#pragma once

#include "model/activations.h"
#include "model/block_parameters.h"
#include "model/layer_context.h"

namespace vitpipe {

void head_forward(const LayerContext& ctx, const HeadParameters& weights, const Tensor& input /*[b, T, D] f32*/,
                  const HeadActivations& saved);

// Multi-label: targets [b, L] f32 (0/1), BCE-with-logits; single-label: targets [b] int64, cross-entropy.
// Returns the loss summed over the micro-batch's elements; grad_scale turns it into the mean over the global batch.
double head_loss(const LayerContext& ctx, const HeadActivations& saved, const Tensor& targets, double grad_scale,
                 const Tensor* pos_weight);

// grad [b, T, D] f32 receives the gradient w.r.t. the input (zero except CLS rows). grad_low (optional) gets an
// act-dtype copy; last_fc2_bias_grad (optional) the column sums (the last block's fc2 bias gradient).
void head_backward(const LayerContext& ctx, const HeadParameters& weights, const HeadParameters& grads,
                   const HeadActivations& saved, const Tensor& grad, const Tensor* grad_low,
                   const Tensor* last_fc2_bias_grad);

}  // namespace vitpipe
