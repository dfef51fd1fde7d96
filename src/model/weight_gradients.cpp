#include "model/weight_gradients.h"

namespace vitpipe {
namespace {

Tensor prefix(const Tensor& t, const Shape& shape) {
  if (!t.defined() || t.numel() == 0) return t;
  return t.view({t.numel()}).slice(0, shape_numel(shape)).view(shape);
}

}  // namespace

BlockWeightGradientInputs BlockWeightGradientInputs::allocate(const ViTConfig& c, int64_t b, DType act,
                                                              bool classifier_token) {
  const int64_t rows = classifier_token ? b : b * c.tokens(), d = c.hidden_size;
  BlockWeightGradientInputs w;
  w.fc2_out = Tensor::empty({rows, d}, act);
  w.fc1_out = Tensor::empty({rows, c.intermediate_size}, act);
  w.out_proj = Tensor::empty({rows, d}, act);
  w.qkv = Tensor::empty({b, c.tokens(), 3 * d}, act);
  return w;
}

BlockWeightGradientInputs BlockWeightGradientInputs::rows_for(const ViTConfig& c, int64_t b) const {
  const int64_t rows = b * c.tokens(), d = c.hidden_size;
  BlockWeightGradientInputs w;
  w.fc2_out = prefix(fc2_out, {rows, d});
  w.fc1_out = prefix(fc1_out, {rows, c.intermediate_size});
  w.out_proj = prefix(out_proj, {rows, d});
  w.qkv = prefix(qkv, {b, c.tokens(), 3 * d});
  return w;
}

BlockWeightGradientInputs BlockWeightGradientInputs::classifier_token_rows(const ViTConfig& c, int64_t b) const {
  BlockWeightGradientInputs w;
  w.qkv = prefix(qkv, {b, c.tokens(), 3 * c.hidden_size});
  w.fc2_out = prefix(fc2_out, {b, c.hidden_size});
  w.fc1_out = prefix(fc1_out, {b, c.intermediate_size});
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

void block_weight_gradients(const LayerContext& ctx, const BlockParameters& g, const BlockActivations& a,
                            const BlockWeightGradientInputs& w) {
  Backend& be = ctx.backend;
  // The order of encoder_block_backward's weight GEMMs (MLP first), so the sums are the same per micro-batch.
  be.linear_backward_weight(w.fc2_out, a.gelu, g.fc2_weight);
  be.linear_backward_weight(w.fc1_out, a.ln2, g.fc1_weight);
  be.linear_backward_weight(w.out_proj, a.attention, g.out_weight);
  be.linear_backward_weight(w.qkv.view({a.ln1.dim(0), w.qkv.dim(2)}), a.ln1, g.qkv_weight);
}

void embeddings_weight_gradients(const LayerContext& ctx, const EmbeddingParameters& g, const EmbeddingActivations& a,
                                 const Tensor& grad_patches) {
  ctx.backend.linear_backward_weight(grad_patches, a.patches, g.patch_weight);
}

void head_weight_gradients(const LayerContext& ctx, const HeadParameters& g, const HeadActivations& a) {
  ctx.backend.linear_backward_weight(a.grad_logits, a.cls_norm, g.classifier_weight);
}

}  // namespace vitpipe
