// Patch embedding (a GEMM on patches), CLS token and position embeddings.
#pragma once

#include "model/activations.h"
#include "model/block_parameters.h"
#include "model/layer_context.h"

namespace vitpipe {

// images [b, C, S, S] f32 -> output [b, T, D] f32.
void embeddings_forward(const LayerContext& ctx, const EmbeddingParameters& weights,
                        const EmbeddingParameters& gemm_weights, const Tensor& images,
                        const EmbeddingActivations& saved, const Tensor& output);
// grad [b, T, D] f32: gradient w.r.t. the embeddings output. Parameter gradients add. With `deferred_grad_patches`
// (split backward) the patch projection's output gradient lands there and its weight GEMM is left to
// embeddings_weight_gradients (model/weight_gradients.h).
void embeddings_backward(const LayerContext& ctx, const EmbeddingParameters& grads, const EmbeddingActivations& saved,
                         const Tensor& grad, const GradientWorkspace& workspace,
                         const Tensor* deferred_grad_patches = nullptr);

}  // namespace vitpipe
