#include "model/classifier_head.h"

#include "util/error.h"

namespace vitpipe {

void head_forward(const LayerContext& ctx, const HeadParameters& w, const HeadActivations& a, const Tensor& hidden) {
  Backend& be = ctx.backend;
  const ViTConfig& c = ctx.config;
  const double eps = c.layer_norm_eps;
  switch (c.head) {
    case HeadKind::cls_token:
      be.layernorm_forward(a.tokens, w.norm_weight, w.norm_bias, eps, a.normed, a.mean, a.rstd);
      be.linear_forward(a.normed, w.classifier_weight, &w.classifier_bias, nullptr, a.logits);
      break;
    case HeadKind::cls_and_distillation: {
      const int64_t b = a.logits.dim(0);
      be.layernorm_forward(a.tokens, w.norm_weight, w.norm_bias, eps, a.normed, a.mean, a.rstd);
      be.linear_forward(a.normed.slice(0, b), w.classifier_weight, &w.classifier_bias, nullptr, a.half_logits);
      be.linear_forward(a.normed.slice(b, 2 * b), w.distillation_weight, &w.distillation_bias, &a.half_logits,
                        a.logits);
      be.scale(a.logits, 0.5, a.logits);  // transformers: (cls_logits + distillation_logits) / 2
      break;
    }
    case HeadKind::cls_and_patch_mean: {
      const int64_t b = a.logits.dim(0);
      be.layernorm_forward(hidden, w.norm_weight, w.norm_bias, eps, a.normed, a.mean, a.rstd);
      be.cls_and_mean_forward(a.normed.view({b, c.tokens(), c.hidden_size}), c.prefix_tokens(), a.features);
      be.linear_forward(a.features, w.classifier_weight, &w.classifier_bias, nullptr, a.logits);
      break;
    }
  }
}

double head_loss(const LayerContext& ctx, const HeadActivations& a, const Tensor& targets, double grad_scale,
                 const Tensor* pos_weight, const Tensor* weights) {
  if (ctx.config.problem_type == ProblemType::multi_label) {
    VP_REQUIRE(targets.dtype() == DType::f32 && targets.numel() == a.logits.numel(),
               "multi-label loss: targets must be [batch, labels] f32, got ", shape_string(targets.shape()));
    return ctx.backend.bce_with_logits(a.logits, targets, pos_weight, weights, grad_scale, a.grad_logits);
  }
  VP_REQUIRE(pos_weight == nullptr && weights == nullptr, "pos_weight and label weights apply to multi-label only");
  return ctx.backend.cross_entropy(a.logits, targets, grad_scale, a.grad_logits);
}

void head_backward(const LayerContext& ctx, const HeadParameters& w, const HeadParameters& g, const HeadActivations& a,
                   const Tensor& hidden, const HeadGradientFlow& flow) {
  Backend& be = ctx.backend;
  const ViTConfig& c = ctx.config;
  const int64_t b = a.logits.dim(0), d = c.hidden_size;
  const bool norm_trains = g.norm_weight.numel() > 0;
  const bool through_norm = flow.need_input_grad || norm_trains;
  LayerNormBackwardArgs ln;
  ln.weight = w.norm_weight;
  ln.mean = a.mean;
  ln.rstd = a.rstd;
  ln.grad_out = a.grad_normed;
  ln.grad_weight = norm_trains ? g.norm_weight : flow.scratch.slice(0, d);
  ln.grad_bias = norm_trains ? g.norm_bias : flow.scratch.slice(d, 2 * d);
  if (flow.last_fc2_bias_grad) ln.grad_in_colsum = *flow.last_fc2_bias_grad;
  switch (c.head) {
    case HeadKind::cls_token:
      if (!flow.defer_weight) be.linear_backward_weight(a.grad_logits, a.normed, g.classifier_weight);
      be.bias_backward(a.grad_logits, g.classifier_bias);
      if (!through_norm) return;
      be.linear_backward_input(a.grad_logits, w.classifier_weight, a.grad_normed);
      ln.in = a.tokens;
      ln.grad_in = a.grad_tokens;
      if (flow.grad_tokens_low) ln.grad_in_copy = *flow.grad_tokens_low;
      break;
    case HeadKind::cls_and_distillation: {
      // Each classifier sees half the gradient of the averaged logits.
      be.scale(a.grad_logits, 0.5, a.half_logits);
      if (!flow.defer_weight) be.linear_backward_weight(a.half_logits, a.normed.slice(0, b), g.classifier_weight);
      be.bias_backward(a.half_logits, g.classifier_bias);
      if (!flow.defer_weight) be.linear_backward_weight(a.half_logits, a.normed.slice(b, 2 * b), g.distillation_weight);
      be.bias_backward(a.half_logits, g.distillation_bias);
      if (!through_norm) return;
      be.linear_backward_input(a.half_logits, w.classifier_weight, a.grad_normed.slice(0, b));
      be.linear_backward_input(a.half_logits, w.distillation_weight, a.grad_normed.slice(b, 2 * b));
      ln.in = a.tokens;
      ln.grad_in = a.grad_tokens;
      ln.grad_in_colsum = Tensor();  // the stage scatters the two tokens and sums the whole gradient
      break;
    }
    case HeadKind::cls_and_patch_mean:
      if (!flow.defer_weight) be.linear_backward_weight(a.grad_logits, a.features, g.classifier_weight);
      be.bias_backward(a.grad_logits, g.classifier_bias);
      if (!through_norm) return;
      be.linear_backward_input(a.grad_logits, w.classifier_weight, a.grad_features);
      be.cls_and_mean_backward(a.grad_features, c.prefix_tokens(), a.grad_normed.view({b, c.tokens(), d}));
      ln.in = hidden;
      ln.grad_in = flow.grad_hidden;
      if (flow.grad_hidden_low) ln.grad_in_copy = *flow.grad_hidden_low;
      break;
  }
  be.layernorm_backward(ln);
}

}  // namespace vitpipe
