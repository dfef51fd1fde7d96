#include "model/activations.h"

namespace vitpipe {
namespace {

// A view of the first `rows` rows of a buffer allocated for more (the micro-batch may be smaller than the max).
Tensor prefix(const Tensor& t, const Shape& shape) {
  if (!t.defined() || t.numel() == 0) return t;
  return t.view({t.numel()}).slice(0, shape_numel(shape)).view(shape);
}

size_t sum_bytes(std::initializer_list<const Tensor*> tensors) {
  size_t total = 0;
  for (const Tensor* t : tensors) total += t->nbytes();
  return total;
}

}  // namespace

BlockActivations BlockActivations::allocate(const ViTConfig& c, int64_t b, DType act) {
  const int64_t rows = b * c.tokens(), d = c.hidden_size, inner = c.intermediate_size, t = c.tokens();
  BlockActivations a;
  a.ln1 = Tensor::empty({rows, d}, act);
  a.mean1 = Tensor::empty({rows});
  a.rstd1 = Tensor::empty({rows});
  a.qkv = Tensor::empty({b, t, 3 * d}, act);
  a.probs = Tensor::empty({b, c.num_attention_heads, t, t}, act);
  a.attention = Tensor::empty({rows, d}, act);
  a.mid = Tensor::empty({rows, d});
  a.ln2 = Tensor::empty({rows, d}, act);
  a.mean2 = Tensor::empty({rows});
  a.rstd2 = Tensor::empty({rows});
  a.pre_gelu = Tensor::empty({rows, inner}, act);
  a.gelu = Tensor::empty({rows, inner}, act);
  a.cls_input = Tensor::empty({b, d});
  return a;
}

BlockActivations BlockActivations::rows_for(const ViTConfig& c, int64_t b) const {
  const int64_t rows = b * c.tokens(), d = c.hidden_size, inner = c.intermediate_size, t = c.tokens();
  BlockActivations a;
  a.ln1 = prefix(ln1, {rows, d});
  a.mean1 = prefix(mean1, {rows});
  a.rstd1 = prefix(rstd1, {rows});
  a.qkv = prefix(qkv, {b, t, 3 * d});
  a.probs = prefix(probs, {b, c.num_attention_heads, t, t});
  a.attention = prefix(attention, {rows, d});
  a.mid = prefix(mid, {rows, d});
  a.ln2 = prefix(ln2, {rows, d});
  a.mean2 = prefix(mean2, {rows});
  a.rstd2 = prefix(rstd2, {rows});
  a.pre_gelu = prefix(pre_gelu, {rows, inner});
  a.gelu = prefix(gelu, {rows, inner});
  a.cls_input = prefix(cls_input, {b, d});
  return a;
}

BlockActivations BlockActivations::classifier_token_rows(const ViTConfig& c, int64_t b) const {
  const int64_t d = c.hidden_size, inner = c.intermediate_size, t = c.tokens();
  BlockActivations a = rows_for(c, b);
  a.probs = prefix(probs, {b, c.num_attention_heads, t});
  a.attention = prefix(attention, {b, d});
  a.mid = prefix(mid, {b, d});
  a.ln2 = prefix(ln2, {b, d});
  a.mean2 = prefix(mean2, {b});
  a.rstd2 = prefix(rstd2, {b});
  a.pre_gelu = prefix(pre_gelu, {b, inner});
  a.gelu = prefix(gelu, {b, inner});
  return a;
}

size_t BlockActivations::bytes() const {
  return sum_bytes(
      {&ln1, &mean1, &rstd1, &qkv, &probs, &attention, &mid, &ln2, &mean2, &rstd2, &pre_gelu, &gelu, &cls_input});
}

EmbeddingActivations EmbeddingActivations::allocate(const ViTConfig& c, int64_t b, DType act) {
  EmbeddingActivations a;
  a.patches = Tensor::empty({b * c.num_patches(), c.patch_dim()}, act);
  a.projection = Tensor::empty({b * c.num_patches(), c.hidden_size});
  return a;
}

EmbeddingActivations EmbeddingActivations::rows_for(const ViTConfig& c, int64_t b) const {
  EmbeddingActivations a;
  a.patches = prefix(patches, {b * c.num_patches(), c.patch_dim()});
  a.projection = prefix(projection, {b * c.num_patches(), c.hidden_size});
  return a;
}

size_t EmbeddingActivations::bytes() const { return sum_bytes({&patches, &projection}); }

HeadActivations HeadActivations::allocate(const ViTConfig& c, int64_t b) {
  const int64_t d = c.hidden_size, l = c.num_labels();
  HeadActivations a;
  a.cls = Tensor::empty({b, d});
  a.cls_norm = Tensor::empty({b, d});
  a.mean = Tensor::empty({b});
  a.rstd = Tensor::empty({b});
  a.logits = Tensor::empty({b, l});
  a.grad_logits = Tensor::empty({b, l});
  a.grad_cls_norm = Tensor::empty({b, d});
  a.grad_cls = Tensor::empty({b, d});
  return a;
}

HeadActivations HeadActivations::rows_for(const ViTConfig& c, int64_t b) const {
  const int64_t d = c.hidden_size, l = c.num_labels();
  HeadActivations a;
  a.cls = prefix(cls, {b, d});
  a.cls_norm = prefix(cls_norm, {b, d});
  a.mean = prefix(mean, {b});
  a.rstd = prefix(rstd, {b});
  a.logits = prefix(logits, {b, l});
  a.grad_logits = prefix(grad_logits, {b, l});
  a.grad_cls_norm = prefix(grad_cls_norm, {b, d});
  a.grad_cls = prefix(grad_cls, {b, d});
  return a;
}

size_t HeadActivations::bytes() const {
  return sum_bytes({&cls, &cls_norm, &mean, &rstd, &logits, &grad_logits, &grad_cls_norm, &grad_cls});
}

GradientWorkspace GradientWorkspace::allocate(const ViTConfig& c, int64_t b, DType act, bool embeddings) {
  const int64_t rows = b * c.tokens(), d = c.hidden_size;
  GradientWorkspace w;
  if (act != DType::f32) w.residual_low = Tensor::empty({rows, d}, act);
  w.ln = Tensor::empty({rows, d}, act);
  w.attention = Tensor::empty({rows, d}, act);
  w.qkv = Tensor::empty({b, c.tokens(), 3 * d}, act);
  w.mlp = Tensor::empty({rows, c.intermediate_size}, act);
  if (embeddings) w.patches = Tensor::empty({b * c.num_patches(), d}, act);
  return w;
}

GradientWorkspace GradientWorkspace::rows_for(const ViTConfig& c, int64_t b) const {
  const int64_t rows = b * c.tokens(), d = c.hidden_size;
  GradientWorkspace w;
  w.residual_low = prefix(residual_low, {rows, d});
  w.ln = prefix(ln, {rows, d});
  w.attention = prefix(attention, {rows, d});
  w.qkv = prefix(qkv, {b, c.tokens(), 3 * d});
  w.mlp = prefix(mlp, {rows, c.intermediate_size});
  w.patches = prefix(patches, {b * c.num_patches(), d});
  return w;
}

size_t GradientWorkspace::bytes() const { return sum_bytes({&residual_low, &ln, &attention, &qkv, &mlp, &patches}); }

}  // namespace vitpipe
