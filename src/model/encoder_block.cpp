#include "model/encoder_block.h"

#include "util/error.h"

namespace vitpipe {
namespace {

const Tensor* optional(const Tensor& t) { return t.numel() ? &t : nullptr; }

constexpr LinearSite kQkv[3] = {LinearSite::query, LinearSite::key, LinearSite::value};

}  // namespace

LayerNormBackwardArgs residual_layernorm_backward(const Tensor& grad_out, const Tensor& in, const Tensor& weight,
                                                  const Tensor& mean, const Tensor& rstd, const Tensor& grad,
                                                  const Tensor& grad_weight, const Tensor& grad_bias,
                                                  const Tensor& scratch) {
  const int64_t d = weight.numel();
  LayerNormBackwardArgs args;
  args.grad_out = grad_out;
  args.in = in;
  args.weight = weight;
  args.mean = mean;
  args.rstd = rstd;
  args.grad_in = grad;
  args.grad_residual = grad;
  args.grad_weight = grad_weight.numel() ? grad_weight : scratch.slice(0, d);
  args.grad_bias = grad_bias.numel() ? grad_bias : scratch.slice(d, 2 * d);
  return args;
}

void lora_forward_at(const LayerContext& ctx, const BlockParameters& gw, LinearSite site, const Tensor& in,
                     const BlockActivations& a, const Tensor& out, int64_t column) {
  const LoraParameters& l = gw.lora_at(site);
  if (!l.present()) return;
  ctx.backend.lora_forward(in, l.a, l.b, ctx.lora_scale, a.lora_low[static_cast<size_t>(site)], out, column);
}

void lora_backward_at(const LayerContext& ctx, const BlockParameters& gw, const BlockParameters& g, LinearSite site,
                      const Tensor& grad_out, int64_t column, const Tensor& in, const BlockActivations& a,
                      const Tensor* grad_in, bool weight_gradients) {
  const LoraParameters& l = gw.lora_at(site);
  if (!l.present()) return;
  const LoraParameters& gl = g.lora_at(site);
  const Tensor* grad_a = weight_gradients ? optional(gl.a) : nullptr;
  const Tensor* grad_b = weight_gradients ? optional(gl.b) : nullptr;
  if (!grad_in && !grad_a && !grad_b) return;
  ctx.backend.lora_backward(grad_out, column, in, l.a, l.b, ctx.lora_scale, a.lora_low[static_cast<size_t>(site)],
                            grad_in, grad_a, grad_b);
}

void fc1_activation_forward(const LayerContext& ctx, const BlockParameters& w, const BlockParameters& gw,
                            const BlockActivations& a) {
  Backend& be = ctx.backend;
  if (!ctx.config.swiglu && !gw.lora_at(LinearSite::fc1).present()) {
    // Inference keeps only the activation; training keeps the pre-activation for GELU's backward pass.
    be.linear_gelu_forward(a.ln2, gw.fc1_weight, w.fc1_bias, ctx.inference ? nullptr : &a.pre_gelu, a.gelu);
    return;
  }
  be.linear_forward(a.ln2, gw.fc1_weight, &w.fc1_bias, nullptr, a.pre_gelu);
  lora_forward_at(ctx, gw, LinearSite::fc1, a.ln2, a, a.pre_gelu);
  if (ctx.config.swiglu) {
    be.swiglu_forward(a.pre_gelu, a.gelu);
  } else {
    be.gelu_forward(a.pre_gelu, a.gelu);
  }
}

void encoder_block_forward(const LayerContext& ctx, const BlockParameters& w, const BlockParameters& gw,
                           const Tensor& input, const BlockActivations& a, const Tensor* output) {
  Backend& be = ctx.backend;
  const ViTConfig& c = ctx.config;
  const double eps = c.layer_norm_eps;
  const int64_t rows = input.dim(0), d = c.hidden_size;
  be.layernorm_forward(input, w.ln1_weight, w.ln1_bias, eps, a.ln1, a.mean1, a.rstd1);
  const Tensor qkv = a.qkv.view({rows, 3 * d});
  be.linear_forward(a.ln1, gw.qkv_weight, optional(w.qkv_bias), nullptr, qkv);
  for (int i = 0; i < 3; ++i) lora_forward_at(ctx, gw, kQkv[i], a.ln1, a, qkv, i * d);
  be.attention_forward(a.qkv, c.num_attention_heads, a.lse, a.attention);
  if (c.layer_scale) {
    be.linear_forward(a.attention, gw.out_weight, &w.out_bias, nullptr, a.attn_out);
    lora_forward_at(ctx, gw, LinearSite::projection, a.attention, a, a.attn_out);
    be.layer_scale_forward(a.attn_out, w.ls1, input, a.mid);
  } else {
    be.linear_forward(a.attention, gw.out_weight, &w.out_bias, &input, a.mid);
    lora_forward_at(ctx, gw, LinearSite::projection, a.attention, a, a.mid);
  }
  be.layernorm_forward(a.mid, w.ln2_weight, w.ln2_bias, eps, a.ln2, a.mean2, a.rstd2);
  fc1_activation_forward(ctx, w, gw, a);
  if (c.layer_scale) {
    // The branch output is saved even when recomputing: the LayerScale gradient reads it.
    be.linear_forward(a.gelu, gw.fc2_weight, &w.fc2_bias, nullptr, a.mlp_out);
    lora_forward_at(ctx, gw, LinearSite::fc2, a.gelu, a, a.mlp_out);
    if (output) be.layer_scale_forward(a.mlp_out, w.ls2, a.mid, *output);
  } else if (output) {
    be.linear_forward(a.gelu, gw.fc2_weight, &w.fc2_bias, &a.mid, *output);
    lora_forward_at(ctx, gw, LinearSite::fc2, a.gelu, a, *output);
  }
}

void encoder_block_backward(const LayerContext& ctx, const BlockParameters& w, const BlockParameters& gw,
                            const BlockParameters& g, const Tensor& input, const BlockActivations& a,
                            const GradientWorkspace& ws, const BlockGradientFlow& flow) {
  Backend& be = ctx.backend;
  const ViTConfig& c = ctx.config;
  const int64_t rows = input.dim(0), d = c.hidden_size;
  const bool low = ctx.low_precision();
  // Split backward: the weight GEMMs (and LoRA's A/B gradients) are left to block_weight_gradients, which reads the
  // output gradients of the linear layers from `deferred`; everything else is as in the whole backward pass.
  const BlockWeightGradientInputs* deferred = flow.deferred;
  const bool weights = deferred == nullptr;
  const Tensor mlp = deferred ? deferred->fc1_out : ws.mlp;  // gradient at fc1's output [rows, fc1_out]

  // MLP branch: out = mid + [l2 *] (act(ln2 W1^T + b1) W2^T + b2)
  Tensor branch = deferred ? deferred->fc2_out : flow.grad_low;  // gradient at fc2's output, act dtype
  if (c.layer_scale) {
    branch = deferred ? deferred->fc2_out : ws.branch;
    be.layer_scale_backward(flow.grad, a.mlp_out, w.ls2, branch, optional(g.ls2), optional(g.fc2_bias));
  }
  const Tensor act_grad = c.swiglu ? ws.gated : mlp;  // gradient at the activation's output [rows, I]
  if (weights && g.fc2_weight.numel()) be.linear_backward_weight(branch, a.gelu, g.fc2_weight);
  be.linear_backward_input(branch, gw.fc2_weight, act_grad);
  lora_backward_at(ctx, gw, g, LinearSite::fc2, branch, 0, a.gelu, a, &act_grad, weights);
  if (c.swiglu) {
    be.swiglu_backward(ws.gated, a.pre_gelu, mlp, optional(g.fc1_bias));
  } else {
    be.gelu_backward(mlp, a.pre_gelu, mlp, optional(g.fc1_bias));
  }
  if (weights && g.fc1_weight.numel()) be.linear_backward_weight(mlp, a.ln2, g.fc1_weight);
  be.linear_backward_input(mlp, gw.fc1_weight, ws.ln);
  lora_backward_at(ctx, gw, g, LinearSite::fc1, mlp, 0, a.ln2, a, &ws.ln, weights);
  LayerNormBackwardArgs ln2 = residual_layernorm_backward(ws.ln, a.mid, w.ln2_weight, a.mean2, a.rstd2, flow.grad,
                                                          g.ln2_weight, g.ln2_bias, ws.scratch);
  if (!c.layer_scale) {
    if (deferred) {
      ln2.grad_in_copy = deferred->out_proj;  // kept for W: flow.grad moves on
    } else if (low) {
      ln2.grad_in_copy = flow.grad_low;
    }
    // The attention projection's bias sees the gradient at `mid`.
    if (g.out_bias.numel()) ln2.grad_in_colsum = g.out_bias;
  }
  be.layernorm_backward(ln2);

  // Attention branch: mid = x + [l1 *] (attn(ln1 Wqkv^T + bqkv) Wo^T + bo)
  branch = deferred ? deferred->out_proj : flow.grad_low;
  if (c.layer_scale) {
    branch = deferred ? deferred->out_proj : ws.branch;
    be.layer_scale_backward(flow.grad, a.attn_out, w.ls1, branch, optional(g.ls1), optional(g.out_bias));
  }
  if (weights && g.out_weight.numel()) be.linear_backward_weight(branch, a.attention, g.out_weight);
  be.linear_backward_input(branch, gw.out_weight, ws.attention);
  lora_backward_at(ctx, gw, g, LinearSite::projection, branch, 0, a.attention, a, &ws.attention, weights);
  const Tensor qkv = deferred ? deferred->qkv : ws.qkv;
  be.attention_backward(ws.attention, a.qkv, a.attention, a.lse, c.num_attention_heads, qkv, optional(g.qkv_bias));
  const Tensor grad_qkv = qkv.view({rows, 3 * d});
  if (weights && g.qkv_weight.numel()) be.linear_backward_weight(grad_qkv, a.ln1, g.qkv_weight);
  // Below LayerNorm 1 only its own parameters and the blocks before this one need gradients.
  const bool through_ln1 = flow.need_input_grad || g.ln1_weight.numel() > 0;
  if (through_ln1) be.linear_backward_input(grad_qkv, gw.qkv_weight, ws.ln);
  for (int i = 0; i < 3; ++i) {
    lora_backward_at(ctx, gw, g, kQkv[i], grad_qkv, i * d, a.ln1, a, through_ln1 ? &ws.ln : nullptr, weights);
  }
  if (!through_ln1) return;
  LayerNormBackwardArgs ln1 = residual_layernorm_backward(ws.ln, input, w.ln1_weight, a.mean1, a.rstd1, flow.grad,
                                                          g.ln1_weight, g.ln1_bias, ws.scratch);
  if ((low || deferred) && flow.need_low_on_exit) {
    ln1.grad_in_copy = flow.grad_low_on_exit.numel() ? flow.grad_low_on_exit : flow.grad_low;
  }
  if (flow.previous_fc2_bias_grad) ln1.grad_in_colsum = *flow.previous_fc2_bias_grad;
  be.layernorm_backward(ln1);
}

}  // namespace vitpipe
