#include "model/embeddings.h"

namespace vitpipe {

void embeddings_forward(const LayerContext& ctx, const EmbeddingParameters& w, const EmbeddingParameters& gw,
                        const Tensor& images, const EmbeddingActivations& a, const Tensor& output) {
  Backend& be = ctx.backend;
  be.patchify(images, ctx.config.patch_size, a.patches);
  be.linear_forward(a.patches, gw.patch_weight, &w.patch_bias, nullptr, a.projection);
  be.embeddings_forward(a.projection, w.cls, w.position, output);
}

void embeddings_backward(const LayerContext& ctx, const EmbeddingParameters& g, const EmbeddingActivations& a,
                         const Tensor& grad, const GradientWorkspace& ws, const Tensor* deferred_grad_patches) {
  Backend& be = ctx.backend;
  be.embeddings_backward(grad, g.cls, g.position, deferred_grad_patches ? *deferred_grad_patches : ws.patches,
                         &g.patch_bias);
  if (!deferred_grad_patches) be.linear_backward_weight(ws.patches, a.patches, g.patch_weight);
}

}  // namespace vitpipe
