#include "model/encoder_block.h"

namespace vitpipe {

LayerNormBackwardArgs residual_layernorm_backward(const Tensor& grad_out, const Tensor& in, const Tensor& weight,
                                                  const Tensor& mean, const Tensor& rstd, const Tensor& grad,
                                                  const Tensor& grad_weight, const Tensor& grad_bias) {
  LayerNormBackwardArgs args;
  args.grad_out = grad_out;
  args.in = in;
  args.weight = weight;
  args.mean = mean;
  args.rstd = rstd;
  args.grad_in = grad;
  args.grad_residual = grad;
  args.grad_weight = grad_weight;
  args.grad_bias = grad_bias;
  return args;
}

void encoder_block_forward(const LayerContext& ctx, const BlockParameters& w, const BlockParameters& gw,
                           const Tensor& input, const BlockActivations& a, const Tensor* output) {
  Backend& be = ctx.backend;
  const double eps = ctx.config.layer_norm_eps;
  const int64_t rows = input.dim(0), d = ctx.config.hidden_size;
  be.layernorm_forward(input, w.ln1_weight, w.ln1_bias, eps, a.ln1, a.mean1, a.rstd1);
  be.linear_forward(a.ln1, gw.qkv_weight, w.qkv_bias.numel() ? &w.qkv_bias : nullptr, nullptr,
                    a.qkv.view({rows, 3 * d}));
  be.attention_forward(a.qkv, ctx.config.num_attention_heads, a.probs, a.attention);
  be.linear_forward(a.attention, gw.out_weight, &w.out_bias, &input, a.mid);
  be.layernorm_forward(a.mid, w.ln2_weight, w.ln2_bias, eps, a.ln2, a.mean2, a.rstd2);
  be.linear_forward(a.ln2, gw.fc1_weight, &w.fc1_bias, nullptr, a.pre_gelu);
  be.gelu_forward(a.pre_gelu, a.gelu);
  if (output) be.linear_forward(a.gelu, gw.fc2_weight, &w.fc2_bias, &a.mid, *output);
}

void encoder_block_backward(const LayerContext& ctx, const BlockParameters& w, const BlockParameters& gw,
                            const BlockParameters& g, const Tensor& input, const BlockActivations& a,
                            const GradientWorkspace& ws, const BlockGradientFlow& flow) {
  Backend& be = ctx.backend;
  const int64_t rows = input.dim(0), d = ctx.config.hidden_size;
  const bool low = ctx.low_precision();
  const BlockWeightGradientInputs* deferred = flow.deferred;
  const Tensor grad_out_low = deferred ? deferred->fc2_out : flow.grad_low;
  const Tensor mlp = deferred ? deferred->fc1_out : ws.mlp;
  const Tensor grad_mid_low = deferred ? deferred->out_proj : flow.grad_low;
  const Tensor qkv = deferred ? deferred->qkv : ws.qkv;

  // MLP branch: out = mid + gelu(ln2 W1^T + b1) W2^T + b2
  if (!deferred) be.linear_backward_weight(grad_out_low, a.gelu, g.fc2_weight);
  be.linear_backward_input(grad_out_low, gw.fc2_weight, mlp);
  be.gelu_backward(mlp, a.pre_gelu, mlp, &g.fc1_bias);
  if (!deferred) be.linear_backward_weight(mlp, a.ln2, g.fc1_weight);
  be.linear_backward_input(mlp, gw.fc1_weight, ws.ln);
  LayerNormBackwardArgs ln2 =
      residual_layernorm_backward(ws.ln, a.mid, w.ln2_weight, a.mean2, a.rstd2, flow.grad, g.ln2_weight, g.ln2_bias);
  if (low || deferred) ln2.grad_in_copy = grad_mid_low;
  ln2.grad_in_colsum = g.out_bias;  // the attention projection's bias sees the gradient at `mid`
  be.layernorm_backward(ln2);

  // Attention branch: mid = x + attn(ln1 Wqkv^T + bqkv) Wo^T + bo
  if (!deferred) be.linear_backward_weight(grad_mid_low, a.attention, g.out_weight);
  be.linear_backward_input(grad_mid_low, gw.out_weight, ws.attention);
  be.attention_backward(ws.attention, a.qkv, a.probs, ctx.config.num_attention_heads, qkv,
                        g.qkv_bias.numel() ? &g.qkv_bias : nullptr);
  const Tensor grad_qkv = qkv.view({rows, 3 * d});
  if (!deferred) be.linear_backward_weight(grad_qkv, a.ln1, g.qkv_weight);
  be.linear_backward_input(grad_qkv, gw.qkv_weight, ws.ln);
  LayerNormBackwardArgs ln1 =
      residual_layernorm_backward(ws.ln, input, w.ln1_weight, a.mean1, a.rstd1, flow.grad, g.ln1_weight, g.ln1_bias);
  if ((low || deferred) && flow.need_low_on_exit) {
    ln1.grad_in_copy = flow.grad_low_on_exit.numel() ? flow.grad_low_on_exit : flow.grad_low;
  }
  if (flow.previous_fc2_bias_grad) ln1.grad_in_colsum = *flow.previous_fc2_bias_grad;
  be.layernorm_backward(ln1);
}

}  // namespace vitpipe
