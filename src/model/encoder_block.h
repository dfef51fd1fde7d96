// One pre-LayerNorm transformer block, forward and backward, hand-derived (llm.c style):
//   mid = x + O(Attn(LN1(x)));  out = mid + FC2(GELU(FC1(LN2(mid))))
#pragma once

#include "model/activations.h"
#include "model/block_parameters.h"
#include "model/layer_context.h"
#include "model/weight_gradients.h"

namespace vitpipe {

// `weights` are the fp32 master values (LayerNorm, biases); `gemm_weights` the GEMM operands (the same tensors in
// fp32, a bf16 copy in bf16). input/output: [rows, D] f32 residual stream; output may be null (recomputation).
void encoder_block_forward(const LayerContext& ctx, const BlockParameters& weights, const BlockParameters& gemm_weights,
                           const Tensor& input, const BlockActivations& saved, const Tensor* output);

// Arguments for a block LayerNorm's backward pass that joins the residual stream in place: `grad` (the f32
// residual-stream gradient) += dLayerNorm(in)/d(in) applied to grad_out; grad_weight/grad_bias add. Callers set the
// optional act-dtype copy and column sums.
LayerNormBackwardArgs residual_layernorm_backward(const Tensor& grad_out, const Tensor& in, const Tensor& weight,
                                                  const Tensor& mean, const Tensor& rstd, const Tensor& grad,
                                                  const Tensor& grad_weight, const Tensor& grad_bias);

struct BlockGradientFlow {
  Tensor grad;                    // [rows, D] f32: gradient w.r.t. the block output on entry, w.r.t. its input on exit
  Tensor grad_low;                // the act-dtype copy of `grad` (the same tensor in fp32); valid on entry
  bool need_low_on_exit = false;  // refresh grad_low on exit (the block before this one, in this stage, needs it)
  const Tensor* previous_fc2_bias_grad = nullptr;  // receives the column sums of the input gradient, if given
  // Split backward (model/weight_gradients.h): when set, the weight GEMMs are left to block_weight_gradients and
  // their output gradients land here; deferred->fc2_out must hold the act-dtype output gradient on entry (it is
  // read instead of grad_low).
  const BlockWeightGradientInputs* deferred = nullptr;
  Tensor grad_low_on_exit;  // where the act-dtype copy goes when need_low_on_exit (default grad_low); written in
                            // fp32 too when deferred
};

// Parameter gradients ADD into `grads`. The fc2 bias gradient (column sums of the incoming gradient) is NOT added
// here: whoever produced the incoming gradient adds it (fused into that kernel).
void encoder_block_backward(const LayerContext& ctx, const BlockParameters& weights,
                            const BlockParameters& gemm_weights, const BlockParameters& grads, const Tensor& input,
                            const BlockActivations& saved, const GradientWorkspace& workspace,
                            const BlockGradientFlow& flow);

}  // namespace vitpipe
