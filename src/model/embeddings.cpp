#include "model/embeddings.h"

#include "model/position_interpolation.h"
#include "util/error.h"

namespace vitpipe {
namespace {

Tensor weight_tensor(const std::vector<double>& w, int64_t out, int64_t in) {
  Tensor t = Tensor::empty({out, in});
  for (int64_t i = 0; i < out * in; ++i) t.f32()[i] = static_cast<float>(w[static_cast<size_t>(i)]);
  return t;
}

// ViT's one prefix token with a position: the original kernel; every other layout: the general one.
bool single_cls(const ViTConfig& c) { return c.prefix_tokens() == 1 && c.positioned_prefix() == 1; }

}  // namespace

PositionResampling PositionResampling::placed_on(Backend& backend) const {
  PositionResampling placed;
  if (active()) {
    placed.wy = to_backend(backend, wy);
    placed.wx = to_backend(backend, wx);
  }
  return placed;
}

PositionResampling PositionResampling::for_config(const ViTConfig& c) {
  PositionResampling r;
  if (!c.resamples_positions()) return r;
  VP_REQUIRE(c.position_interpolation != PositionInterpolation::at_load,
             "internal: a model that resizes positions when loading runs on another grid");
  const bool aa = c.position_interpolation == PositionInterpolation::bicubic_antialias;
  const int64_t from = c.position_grid(), to = c.grid();
  r.wy = weight_tensor(bicubic_weight_matrix(from, to, aa), to, from);
  r.wx = r.wy;
  return r;
}

void embeddings_forward(const LayerContext& ctx, const EmbeddingParameters& w, const EmbeddingParameters& gw,
                        const PositionResampling& resampling, const Tensor& images, const EmbeddingActivations& a,
                        const Tensor& output) {
  Backend& be = ctx.backend;
  const ViTConfig& c = ctx.config;
  be.patchify(images, c.patch_size, a.patches);
  be.linear_forward(a.patches, gw.patch_weight, &w.patch_bias, nullptr, a.projection);
  Tensor positions = w.position;
  if (resampling.active()) {
    be.resample_positions_forward(w.position, c.positioned_prefix(), resampling.wy, resampling.wx, a.positions);
    positions = a.positions;
  }
  if (single_cls(c)) {
    be.embeddings_forward(a.projection, w.prefix.view({c.hidden_size}), positions, output);
  } else {
    be.token_embeddings_forward(a.projection, w.prefix, c.positioned_prefix(), positions, output);
  }
}

void embeddings_backward(const LayerContext& ctx, const EmbeddingParameters& g, const PositionResampling& resampling,
                         const EmbeddingActivations& a, const Tensor& grad, const GradientWorkspace& ws,
                         const Tensor* deferred_grad_patches) {
  Backend& be = ctx.backend;
  const ViTConfig& c = ctx.config;
  VP_REQUIRE(g.prefix.numel() && g.position.numel() && g.patch_weight.numel() && g.patch_bias.numel(),
             "internal: the embeddings train as a whole");
  const Tensor grad_patches = deferred_grad_patches ? *deferred_grad_patches : ws.patches;
  Tensor positions = g.position;
  if (resampling.active()) {
    be.zero(ws.positions);  // gradient at the resampled table, mapped back below
    positions = ws.positions;
  }
  if (single_cls(c)) {
    be.embeddings_backward(grad, g.prefix.view({c.hidden_size}), positions, grad_patches, &g.patch_bias);
  } else {
    be.token_embeddings_backward(grad, &g.prefix, c.positioned_prefix(), &positions, grad_patches, &g.patch_bias);
  }
  if (resampling.active()) {
    be.resample_positions_backward(ws.positions, c.positioned_prefix(), resampling.wy, resampling.wx, g.position);
  }
  if (!deferred_grad_patches) be.linear_backward_weight(ws.patches, a.patches, g.patch_weight);
}

}  // namespace vitpipe
