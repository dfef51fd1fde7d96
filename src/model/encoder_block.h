// One pre-LayerNorm transformer block, forward and backward, hand-derived (llm.c style), with the family options:
//   ViT / DeiT:  mid = x + O(Attn(LN1(x)));             out = mid + FC2(GELU(FC1(LN2(mid))))
//   DINOv2:      mid = x + l1 * O(Attn(LN1(x)));        out = mid + l2 * FC2(act(FC1(LN2(mid))))
// act = GELU, or SwiGLU (silu(x1) * x2 over the two halves of FC1's output). LoRA (peft) adds
// scale * (x A^T) B^T to any of the linear layers q, k, v, O, FC1, FC2.
#pragma once

#include "model/activations.h"
#include "model/block_parameters.h"
#include "model/layer_context.h"
#include "model/weight_gradients.h"

namespace vitpipe {

// `weights` are the fp32 master values (LayerNorm, biases, LayerScale); `gemm_weights` the GEMM operands (the same
// tensors in fp32, a bf16 copy in bf16). input/output: [rows, D] f32 residual stream; output may be null
// (recomputation: everything the backward pass reads is computed, the output is not).
void encoder_block_forward(const LayerContext& ctx, const BlockParameters& weights, const BlockParameters& gemm_weights,
                           const Tensor& input, const BlockActivations& saved, const Tensor* output);

// Arguments for a block LayerNorm's backward pass that joins the residual stream in place: `grad` (the f32
// residual-stream gradient) += dLayerNorm(in)/d(in) applied to grad_out; grad_weight/grad_bias add (a frozen
// LayerNorm's go to `scratch`). Callers set the optional act-dtype copy and column sums.
LayerNormBackwardArgs residual_layernorm_backward(const Tensor& grad_out, const Tensor& in, const Tensor& weight,
                                                  const Tensor& mean, const Tensor& rstd, const Tensor& grad,
                                                  const Tensor& grad_weight, const Tensor& grad_bias,
                                                  const Tensor& scratch);

struct BlockGradientFlow {
  Tensor grad;                    // [rows, D] f32: gradient w.r.t. the block output on entry, w.r.t. its input on exit
  Tensor grad_low;                // the act-dtype copy of `grad` (the same tensor in fp32); valid on entry (no
                                  // LayerScale: the block reads it; with LayerScale it reads `grad`)
  bool need_low_on_exit = false;  // refresh grad_low on exit (the block before this one, in this stage, needs it)
  bool need_input_grad = true;    // false: nothing before this block trains; `grad` is left as it is
  const Tensor* previous_fc2_bias_grad = nullptr;  // receives the column sums of the input gradient, if given
  // Split backward (model/weight_gradients.h): when set, the weight GEMMs and LoRA's A/B gradients are left to
  // block_weight_gradients and the linear layers' output gradients land here. Without LayerScale deferred->fc2_out
  // must hold the act-dtype output gradient on entry (read instead of grad_low); with LayerScale the block writes it
  // from `grad` (the LayerScale, bias and LayerNorm parameter gradients stay in this pass, fused into its kernels).
  const BlockWeightGradientInputs* deferred = nullptr;
  Tensor grad_low_on_exit;  // where the act-dtype copy goes when need_low_on_exit (default grad_low); written in
                            // fp32 too when deferred
};

// Parameter gradients ADD into `grads` (empty views: frozen, skipped). Without LayerScale, the fc2 bias gradient
// (column sums of the incoming gradient) is NOT added here: whoever produced the incoming gradient adds it (fused
// into that kernel); with LayerScale this block adds its fc2 and projection bias gradients itself.
void encoder_block_backward(const LayerContext& ctx, const BlockParameters& weights,
                            const BlockParameters& gemm_weights, const BlockParameters& grads, const Tensor& input,
                            const BlockActivations& saved, const GradientWorkspace& workspace,
                            const BlockGradientFlow& flow);

// Shared by both block kinds: fc1 and its activation (GELU or SwiGLU) from saved.ln2 into saved.gelu. In inference
// without LoRA on fc1, GELU runs in the GEMM's epilogue and saved.pre_gelu is not written.
void fc1_activation_forward(const LayerContext& ctx, const BlockParameters& weights,
                            const BlockParameters& gemm_weights, const BlockActivations& saved);
// Shared by both block kinds: LoRA on linear layer `site` (no-op without it). `out` may be a wider tensor whose
// columns [column, column + N) are the layer's output.
void lora_forward_at(const LayerContext& ctx, const BlockParameters& gemm_weights, LinearSite site, const Tensor& in,
                     const BlockActivations& saved, const Tensor& out, int64_t column = 0);
// grad_in (may be null) += the LoRA path's input gradient; the A/B gradients add into `grads` (when they train and
// `weight_gradients`: a split backward's B pass leaves them to W).
void lora_backward_at(const LayerContext& ctx, const BlockParameters& gemm_weights, const BlockParameters& grads,
                      LinearSite site, const Tensor& grad_out, int64_t column, const Tensor& in,
                      const BlockActivations& saved, const Tensor* grad_in, bool weight_gradients = true);

}  // namespace vitpipe
