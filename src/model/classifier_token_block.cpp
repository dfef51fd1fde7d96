#include "model/classifier_token_block.h"

#include "model/encoder_block.h"
#include "util/error.h"

namespace vitpipe {
namespace {

const Tensor* optional(const Tensor& t) { return t.numel() ? &t : nullptr; }

constexpr LinearSite kQkv[3] = {LinearSite::query, LinearSite::key, LinearSite::value};

}  // namespace

void classifier_token_block_forward(const LayerContext& ctx, const BlockParameters& w, const BlockParameters& gw,
                                    const Tensor& input, const BlockActivations& a, const Tensor* output) {
  Backend& be = ctx.backend;
  const ViTConfig& c = ctx.config;
  VP_REQUIRE(!c.layer_scale, "internal: the classifier-token block has no LayerScale");
  const int64_t rows = input.dim(0), d = c.hidden_size, b = a.cls_input.dim(0);
  be.layernorm_forward(input, w.ln1_weight, w.ln1_bias, c.layer_norm_eps, a.ln1, a.mean1, a.rstd1);
  const Tensor qkv = a.qkv.view({rows, 3 * d});
  be.linear_forward(a.ln1, gw.qkv_weight, optional(w.qkv_bias), nullptr, qkv);
  for (int i = 0; i < 3; ++i) lora_forward_at(ctx, gw, kQkv[i], a.ln1, a, qkv, i * d);
  be.cls_attention_forward(a.qkv, c.num_attention_heads, a.lse, a.attention);
  be.gather_cls(input.view({b, rows / b, d}), a.cls_input);
  be.linear_forward(a.attention, gw.out_weight, &w.out_bias, &a.cls_input, a.mid);
  lora_forward_at(ctx, gw, LinearSite::projection, a.attention, a, a.mid);
  be.layernorm_forward(a.mid, w.ln2_weight, w.ln2_bias, c.layer_norm_eps, a.ln2, a.mean2, a.rstd2);
  fc1_activation_forward(ctx, w, gw, a);
  if (output) {
    be.linear_forward(a.gelu, gw.fc2_weight, &w.fc2_bias, &a.mid, *output);
    lora_forward_at(ctx, gw, LinearSite::fc2, a.gelu, a, *output);
  }
}

void classifier_token_block_backward(const LayerContext& ctx, const BlockParameters& w, const BlockParameters& gw,
                                     const BlockParameters& g, const Tensor& input, const BlockActivations& a,
                                     const GradientWorkspace& ws, const ClassifierTokenGradientFlow& flow) {
  Backend& be = ctx.backend;
  const ViTConfig& c = ctx.config;
  const int64_t rows = input.dim(0), d = c.hidden_size, b = flow.grad_cls.dim(0);
  const bool low = ctx.low_precision();
  // Split backward: as encoder_block_backward's (the weight GEMMs and LoRA's A/B gradients left to W).
  const BlockWeightGradientInputs* deferred = flow.deferred;
  const bool weights = deferred == nullptr;
  const Tensor ln_cls = ws.ln.slice(0, b), attention = ws.attention.slice(0, b);
  const Tensor mlp = deferred ? deferred->fc1_out : ws.mlp.slice(0, b);
  const Tensor act_grad = c.swiglu ? ws.gated.slice(0, b) : mlp;
  const Tensor grad_out_low = deferred ? deferred->fc2_out : flow.grad_cls_low;
  const Tensor grad_mid_low = deferred ? deferred->out_proj : flow.grad_cls_low;

  // MLP branch, token 0: out = mid + act(ln2 W1^T + b1) W2^T + b2
  if (weights && g.fc2_weight.numel()) be.linear_backward_weight(grad_out_low, a.gelu, g.fc2_weight);
  be.linear_backward_input(grad_out_low, gw.fc2_weight, act_grad);
  lora_backward_at(ctx, gw, g, LinearSite::fc2, grad_out_low, 0, a.gelu, a, &act_grad, weights);
  if (c.swiglu) {
    be.swiglu_backward(act_grad, a.pre_gelu, mlp, optional(g.fc1_bias));
  } else {
    be.gelu_backward(mlp, a.pre_gelu, mlp, optional(g.fc1_bias));
  }
  if (weights && g.fc1_weight.numel()) be.linear_backward_weight(mlp, a.ln2, g.fc1_weight);
  be.linear_backward_input(mlp, gw.fc1_weight, ln_cls);
  lora_backward_at(ctx, gw, g, LinearSite::fc1, mlp, 0, a.ln2, a, &ln_cls, weights);
  LayerNormBackwardArgs ln2 = residual_layernorm_backward(ln_cls, a.mid, w.ln2_weight, a.mean2, a.rstd2, flow.grad_cls,
                                                          g.ln2_weight, g.ln2_bias, ws.scratch);
  if (low || deferred) ln2.grad_in_copy = grad_mid_low;
  if (g.out_bias.numel()) ln2.grad_in_colsum = g.out_bias;
  be.layernorm_backward(ln2);

  // Attention branch: token 0 attends; keys and values of every token receive gradients.
  if (weights && g.out_weight.numel()) be.linear_backward_weight(grad_mid_low, a.attention, g.out_weight);
  be.linear_backward_input(grad_mid_low, gw.out_weight, attention);
  lora_backward_at(ctx, gw, g, LinearSite::projection, grad_mid_low, 0, a.attention, a, &attention, weights);
  const Tensor qkv = deferred ? deferred->qkv : ws.qkv;
  be.cls_attention_backward(attention, a.qkv, a.attention, a.lse, c.num_attention_heads, qkv, optional(g.qkv_bias));
  const Tensor grad_qkv = qkv.view({rows, 3 * d});
  if (weights && g.qkv_weight.numel()) be.linear_backward_weight(grad_qkv, a.ln1, g.qkv_weight);
  const bool through_ln1 = flow.need_input_grad || g.ln1_weight.numel() > 0;
  if (through_ln1) be.linear_backward_input(grad_qkv, gw.qkv_weight, ws.ln);
  for (int i = 0; i < 3; ++i) {
    lora_backward_at(ctx, gw, g, kQkv[i], grad_qkv, i * d, a.ln1, a, through_ln1 ? &ws.ln : nullptr, weights);
  }
  if (!through_ln1) return;
  // The residual path reaches the input at token 0 only (mid exists for token 0 alone).
  be.scatter_cls(flow.grad_cls, flow.grad.view({b, rows / b, d}));
  LayerNormBackwardArgs ln1 = residual_layernorm_backward(ws.ln, input, w.ln1_weight, a.mean1, a.rstd1, flow.grad,
                                                          g.ln1_weight, g.ln1_bias, ws.scratch);
  if ((low || deferred) && flow.need_low_on_exit) {
    ln1.grad_in_copy = flow.grad_low_on_exit.numel() ? flow.grad_low_on_exit : flow.grad_low;
  }
  if (flow.previous_fc2_bias_grad) ln1.grad_in_colsum = *flow.previous_fc2_bias_grad;
  be.layernorm_backward(ln1);
}

}  // namespace vitpipe
