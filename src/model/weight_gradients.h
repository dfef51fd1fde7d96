// The weight-gradient pass W of a split backward (ZB-H1, Qi et al. 2023, "Zero Bubble Pipeline Parallelism"). The
// input-gradient pass B computes what the previous stage needs (activation gradients) and the cheap parameter parts
// fused into its kernels (bias column sums, LayerNorm weight and bias, LayerScale gammas, the prefix tokens and
// positions); W runs later, when the stage would otherwise idle: the weight GEMMs grad_weight += grad_out^T . in of
// every trainable linear layer (patch projection, q/k/v, attention projection, fc1 (SwiGLU: both halves), fc2, the
// classifier(s)) and the LoRA A/B gradients of every adapted one. Frozen parameters (empty gradient views) get no W
// work. Between B and W a
// micro-batch keeps the gradients at its linear layers' outputs (below) besides the activations W reads (the layer
// inputs, already saved for the backward pass): the memory plan counts both until W has run.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "model/activations.h"
#include "model/block_parameters.h"
#include "model/layer_context.h"

namespace vitpipe {

// One encoder block's W inputs, act dtype. A classifier-token block (model/classifier_token_block.h) keeps token 0
// only for everything after the attention (classifier_token_rows).
struct BlockWeightGradientInputs {
  Tensor fc2_out;   // [rows, D]: gradient at the block output (fc2's output)
  Tensor fc1_out;   // [rows, fc1_out]: gradient at fc1's output (after the activation's backward)
  Tensor out_proj;  // [rows, D]: gradient at the attention projection's output (the residual stream at `mid`)
  Tensor qkv;       // [b, T, 3D]: gradient at the q/k/v projection's output

  // `classifier_token`: token 0's rows only after the attention (the final block of a stage holding the head).
  static BlockWeightGradientInputs allocate(Backend& backend, const ViTConfig& config, int64_t batch, DType act,
                                            bool classifier_token = false);
  BlockWeightGradientInputs rows_for(const ViTConfig& config, int64_t batch) const;
  BlockWeightGradientInputs classifier_token_rows(const ViTConfig& config, int64_t batch) const;
  size_t bytes() const;
};

// A stage's W inputs for one micro-batch: per block, plus the patch projection's output gradient (first stage).
// The classifier's own W reads the head's saved activations (grad_logits, cls_norm), kept per slot anyway.
struct StageWeightGradientInputs {
  std::vector<BlockWeightGradientInputs> blocks;
  Tensor patches;  // [b * Np, D] act (stage 0 only)

  size_t bytes() const;
};

// W of one block: the weight GEMMs (qkv, attention projection, fc1, fc2) and LoRA A/B gradients that train, ADDING
// into `grads`; `gemm_weights` supplies the LoRA matrices. `saved` and `inputs` are views of the same kind (rows_for
// or classifier_token_rows).
void block_weight_gradients(const LayerContext& ctx, const BlockParameters& gemm_weights, const BlockParameters& grads,
                            const BlockActivations& saved, const BlockWeightGradientInputs& inputs);
// W of the patch embedding: grad_patch_weight += grad_patches^T . patches.
void embeddings_weight_gradients(const LayerContext& ctx, const EmbeddingParameters& grads,
                                 const EmbeddingActivations& saved, const Tensor& grad_patches);
// W of the classifier(s), per head kind (model/classifier_head.h): cls_token grad_logits^T . normed,
// cls_and_distillation half_logits^T . normed (each token's half), cls_and_patch_mean grad_logits^T . features.
void head_weight_gradients(const LayerContext& ctx, const HeadParameters& grads, const HeadActivations& saved);

}  // namespace vitpipe
