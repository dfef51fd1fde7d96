// The final encoder block, computed for the classifier token only. The head reads token 0 of the last hidden state
// and nothing reads the others, so in the last block only keys and values are needed at every token: the attention
// output, its projection, LayerNorm 2 and the MLP run on one row per image. That removes about three quarters of
// the block's GEMM work and all but 1/T of its attention; token 0's values and every gradient are the same math as
// encoder_block's.
#pragma once

#include "model/activations.h"
#include "model/block_parameters.h"
#include "model/layer_context.h"
#include "model/weight_gradients.h"

namespace vitpipe {

// input [b * T, D] f32; saved = BlockActivations::classifier_token_rows(...); output [b, D] f32 (token 0 of the
// block output), may be null (recomputation).
void classifier_token_block_forward(const LayerContext& ctx, const BlockParameters& weights,
                                    const BlockParameters& gemm_weights, const Tensor& input,
                                    const BlockActivations& saved, const Tensor* output);

struct ClassifierTokenGradientFlow {
  Tensor grad_cls;      // [b, D] f32: gradient w.r.t. the token-0 output on entry (then used as scratch)
  Tensor grad_cls_low;  // its act-dtype copy (the same tensor in fp32); valid on entry
  Tensor grad;          // [b * T, D] f32: OVERWRITTEN with the gradient w.r.t. the block input
  Tensor grad_low;      // act-dtype copy of `grad`, refreshed if need_low_on_exit
  bool need_low_on_exit = false;
  bool need_input_grad = true;                     // false: nothing before this block trains
  const Tensor* previous_fc2_bias_grad = nullptr;  // receives the column sums of the input gradient, if given
  // Split backward, as BlockGradientFlow's (classifier_token_rows views): deferred->fc2_out holds the act-dtype
  // gradient of the token-0 output on entry and is read instead of grad_cls_low.
  const BlockWeightGradientInputs* deferred = nullptr;
  Tensor grad_low_on_exit;  // default grad_low
};

// Parameter gradients ADD into `grads` (empty views: frozen, skipped); the fc2 bias gradient is added by whoever
// produced grad_cls (the head).
void classifier_token_block_backward(const LayerContext& ctx, const BlockParameters& weights,
                                     const BlockParameters& gemm_weights, const BlockParameters& grads,
                                     const Tensor& input, const BlockActivations& saved,
                                     const GradientWorkspace& workspace, const ClassifierTokenGradientFlow& flow);

}  // namespace vitpipe
