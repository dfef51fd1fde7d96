#include "model/classifier_head.h"

#include "util/error.h"

namespace vitpipe {

void head_forward(const LayerContext& ctx, const HeadParameters& w, const HeadActivations& a) {
  Backend& be = ctx.backend;
  be.layernorm_forward(a.cls, w.norm_weight, w.norm_bias, ctx.config.layer_norm_eps, a.cls_norm, a.mean, a.rstd);
  be.linear_forward(a.cls_norm, w.classifier_weight, &w.classifier_bias, nullptr, a.logits);
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
                   const Tensor* grad_cls_low, const Tensor* last_fc2_bias_grad, bool defer_weight) {
  Backend& be = ctx.backend;
  if (!defer_weight) be.linear_backward_weight(a.grad_logits, a.cls_norm, g.classifier_weight);
  be.bias_backward(a.grad_logits, g.classifier_bias);
  be.linear_backward_input(a.grad_logits, w.classifier_weight, a.grad_cls_norm);
  LayerNormBackwardArgs ln;
  ln.grad_out = a.grad_cls_norm;
  ln.in = a.cls;
  ln.weight = w.norm_weight;
  ln.mean = a.mean;
  ln.rstd = a.rstd;
  ln.grad_in = a.grad_cls;
  ln.grad_weight = g.norm_weight;
  ln.grad_bias = g.norm_bias;
  if (last_fc2_bias_grad) ln.grad_in_colsum = *last_fc2_bias_grad;
  if (grad_cls_low) ln.grad_in_copy = *grad_cls_low;
  be.layernorm_backward(ln);
}

}  // namespace vitpipe
