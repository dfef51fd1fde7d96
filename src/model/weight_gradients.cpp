#include "model/weight_gradients.h"

#include "model/encoder_block.h"

namespace vitpipe {
namespace {

Tensor prefix(const Tensor& t, const Shape& shape) {
  if (!t.defined() || t.numel() == 0) return t;
  return t.view({t.numel()}).slice(0, shape_numel(shape)).view(shape);
}

}  // namespace

BlockWeightGradientInputs BlockWeightGradientInputs::allocate(Backend& backend, const ViTConfig& c, int64_t b,
                                                              DType act, bool classifier_token) {
  const int64_t rows = classifier_token ? b : b * c.tokens(), d = c.hidden_size;
  BlockWeightGradientInputs w;
  w.fc2_out = backend.allocate({rows, d}, act);
  w.fc1_out = backend.allocate({rows, c.fc1_out()}, act);
  w.out_proj = backend.allocate({rows, d}, act);
  w.qkv = backend.allocate({b, c.tokens(), 3 * d}, act);
  return w;
}

BlockWeightGradientInputs BlockWeightGradientInputs::rows_for(const ViTConfig& c, int64_t b) const {
  const int64_t rows = b * c.tokens(), d = c.hidden_size;
  BlockWeightGradientInputs w;
  w.fc2_out = prefix(fc2_out, {rows, d});
  w.fc1_out = prefix(fc1_out, {rows, c.fc1_out()});
  w.out_proj = prefix(out_proj, {rows, d});
  w.qkv = prefix(qkv, {b, c.tokens(), 3 * d});
  return w;
}

BlockWeightGradientInputs BlockWeightGradientInputs::classifier_token_rows(const ViTConfig& c, int64_t b) const {
  BlockWeightGradientInputs w;
  w.qkv = prefix(qkv, {b, c.tokens(), 3 * c.hidden_size});
  w.fc2_out = prefix(fc2_out, {b, c.hidden_size});
  w.fc1_out = prefix(fc1_out, {b, c.fc1_out()});
  w.out_proj = prefix(out_proj, {b, c.hidden_size});
  return w;
}

size_t BlockWeightGradientInputs::bytes() const {
  return fc2_out.nbytes() + fc1_out.nbytes() + out_proj.nbytes() + qkv.nbytes();
}

size_t StageWeightGradientInputs::bytes() const {
  size_t total = patches.nbytes();
  for (const auto& block : blocks) total += block.bytes();
  return total;
}

void block_weight_gradients(const LayerContext& ctx, const BlockParameters& gw, const BlockParameters& g,
                            const BlockActivations& a, const BlockWeightGradientInputs& w) {
  Backend& be = ctx.backend;
  const int64_t d = ctx.config.hidden_size;
  // The order of encoder_block_backward's weight GEMMs (MLP first), so the sums are the same per micro-batch.
  if (g.fc2_weight.numel()) be.linear_backward_weight(w.fc2_out, a.gelu, g.fc2_weight);
  lora_backward_at(ctx, gw, g, LinearSite::fc2, w.fc2_out, 0, a.gelu, a, nullptr);
  if (g.fc1_weight.numel()) be.linear_backward_weight(w.fc1_out, a.ln2, g.fc1_weight);
  lora_backward_at(ctx, gw, g, LinearSite::fc1, w.fc1_out, 0, a.ln2, a, nullptr);
  if (g.out_weight.numel()) be.linear_backward_weight(w.out_proj, a.attention, g.out_weight);
  lora_backward_at(ctx, gw, g, LinearSite::projection, w.out_proj, 0, a.attention, a, nullptr);
  const Tensor grad_qkv = w.qkv.view({a.ln1.dim(0), w.qkv.dim(2)});
  if (g.qkv_weight.numel()) be.linear_backward_weight(grad_qkv, a.ln1, g.qkv_weight);
  constexpr LinearSite kQkv[3] = {LinearSite::query, LinearSite::key, LinearSite::value};
  for (int i = 0; i < 3; ++i) lora_backward_at(ctx, gw, g, kQkv[i], grad_qkv, i * d, a.ln1, a, nullptr);
}

void embeddings_weight_gradients(const LayerContext& ctx, const EmbeddingParameters& g, const EmbeddingActivations& a,
                                 const Tensor& grad_patches) {
  if (g.patch_weight.numel()) ctx.backend.linear_backward_weight(grad_patches, a.patches, g.patch_weight);
}

void head_weight_gradients(const LayerContext& ctx, const HeadParameters& g, const HeadActivations& a) {
  Backend& be = ctx.backend;
  switch (ctx.config.head) {
    case HeadKind::cls_token:
      if (g.classifier_weight.numel()) be.linear_backward_weight(a.grad_logits, a.normed, g.classifier_weight);
      break;
    case HeadKind::cls_and_distillation: {
      const int64_t b = a.logits.dim(0);
      if (g.classifier_weight.numel()) {
        be.linear_backward_weight(a.half_logits, a.normed.slice(0, b), g.classifier_weight);
      }
      if (g.distillation_weight.numel()) {
        be.linear_backward_weight(a.half_logits, a.normed.slice(b, 2 * b), g.distillation_weight);
      }
      break;
    }
    case HeadKind::cls_and_patch_mean:
      if (g.classifier_weight.numel()) be.linear_backward_weight(a.grad_logits, a.features, g.classifier_weight);
      break;
  }
}

}  // namespace vitpipe
