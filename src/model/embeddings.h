// Patch embedding (a GEMM on patches), the prefix tokens (CLS, DeiT's distillation token, DINOv2's registers) and
// position embeddings, resampled to the input's grid in every pass when the family does that (DINOv2).
#pragma once

#include "model/activations.h"
#include "model/block_parameters.h"
#include "model/layer_context.h"

namespace vitpipe {

// The separable map from the checkpoint's position grid to the input's (dense per-axis weights, f32), or empty
// when the grid is the checkpoint's.
struct PositionResampling {
  Tensor wy, wx;  // [Hd, Hs], [Wd, Ws]
  bool active() const { return wy.numel() > 0; }
  static PositionResampling for_config(const ViTConfig& config);  // host memory
  PositionResampling placed_on(Backend& backend) const;           // the same weights in the backend's memory
};

// images [b, C, S, S] f32 -> output [b, T, D] f32.
void embeddings_forward(const LayerContext& ctx, const EmbeddingParameters& weights,
                        const EmbeddingParameters& gemm_weights, const PositionResampling& resampling,
                        const Tensor& images, const EmbeddingActivations& saved, const Tensor& output);
// grad [b, T, D] f32: gradient w.r.t. the embeddings output. Parameter gradients add (the embeddings train as a
// whole or not at all: called only when they train). With `deferred_grad_patches` (split backward) the patch
// projection's output gradient lands there and its weight GEMM is left to embeddings_weight_gradients
// (model/weight_gradients.h); the prefix tokens', positions' and bias gradients are computed here.
void embeddings_backward(const LayerContext& ctx, const EmbeddingParameters& grads,
                         const PositionResampling& resampling, const EmbeddingActivations& saved, const Tensor& grad,
                         const GradientWorkspace& workspace, const Tensor* deferred_grad_patches = nullptr);

}  // namespace vitpipe
