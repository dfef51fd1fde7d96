// The final LayerNorm, the classifier(s) and the loss, for each family's head (ViTConfig::head):
//   cls_token:             classifier(LN(h[0]))            the final LayerNorm on CLS rows alone (nothing else
//                                                          reaches the logits, so the other rows' gradient is 0)
//   cls_and_distillation:  (cls_classifier(LN(h[0])) + distillation_classifier(LN(h[1]))) / 2 (DeiT with teacher)
//   cls_and_patch_mean:    classifier([LN(h)[0], mean over the patch tokens of LN(h)]) (DINOv2; registers skipped),
//                          which reads every token: the LayerNorm runs on all of them
#pragma once

#include "model/activations.h"
#include "model/block_parameters.h"
#include "model/layer_context.h"

namespace vitpipe {

// cls_token / cls_and_distillation read saved.tokens ([K * b, D] f32, token-major): the final encoder block writes
// token 0 directly (model/classifier_token_block.h), or the stage gathers the tokens from [b, T, D] hidden states.
// cls_and_patch_mean reads `hidden` ([b * T, D] f32, the last hidden state).
void head_forward(const LayerContext& ctx, const HeadParameters& weights, const HeadActivations& saved,
                  const Tensor& hidden);

// Multi-label: targets [b, L] f32 (0/1), BCE-with-logits, `weights` (optional [b, L] f32: 0 masks a label out);
// single-label: targets [b] int64, cross-entropy. Returns the loss summed over the micro-batch's elements (weighted);
// grad_scale turns it into the mean over the global batch.
double head_loss(const LayerContext& ctx, const HeadActivations& saved, const Tensor& targets, double grad_scale,
                 const Tensor* pos_weight, const Tensor* weights = nullptr);

struct HeadGradientFlow {
  bool need_input_grad = true;  // false: nothing before the head trains (a linear probe)
  // cls_token: saved.grad_tokens [b, D] receives the gradient w.r.t. saved.tokens; its act-dtype copy goes to
  // grad_tokens_low (optional). cls_and_distillation: saved.grad_tokens [2b, D] (no copy). cls_and_patch_mean: the
  // gradient w.r.t. every token goes to grad_hidden ([b * T, D] f32, overwritten), its copy to grad_hidden_low.
  const Tensor* grad_tokens_low = nullptr;
  Tensor grad_hidden;
  const Tensor* grad_hidden_low = nullptr;
  const Tensor* last_fc2_bias_grad = nullptr;  // column sums of that gradient (cls_token, cls_and_patch_mean)
  Tensor scratch;                              // [2D] f32: a frozen final LayerNorm's gradients
  // Split backward: the classifier weight GEMMs are left to head_weight_gradients (model/weight_gradients.h), which
  // reads saved.grad_logits (saved.half_logits for cls_and_distillation) and the classifier inputs.
  bool defer_weight = false;
};

// Parameter gradients ADD into `grads` (empty views: frozen, skipped).
void head_backward(const LayerContext& ctx, const HeadParameters& weights, const HeadParameters& grads,
                   const HeadActivations& saved, const Tensor& hidden, const HeadGradientFlow& flow);

}  // namespace vitpipe
