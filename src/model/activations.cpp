#include "model/activations.h"

#include <algorithm>

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

bool is_qkv(LinearSite site) {
  return site == LinearSite::query || site == LinearSite::key || site == LinearSite::value;
}

}  // namespace

BlockActivations BlockActivations::allocate(Backend& backend, const ViTConfig& c, const LoraSettings& lora, int64_t b,
                                            DType act) {
  const int64_t rows = b * c.tokens(), d = c.hidden_size, t = c.tokens();
  BlockActivations a;
  a.ln1 = backend.allocate({rows, d}, act);
  a.mean1 = backend.allocate({rows}, DType::f32);
  a.rstd1 = backend.allocate({rows}, DType::f32);
  a.qkv = backend.allocate({b, t, 3 * d}, act);
  a.lse = backend.allocate({b, c.num_attention_heads, t}, DType::f32);
  a.attention = backend.allocate({rows, d}, act);
  if (c.layer_scale) a.attn_out = backend.allocate({rows, d}, act);
  a.mid = backend.allocate({rows, d}, DType::f32);
  a.ln2 = backend.allocate({rows, d}, act);
  a.mean2 = backend.allocate({rows}, DType::f32);
  a.rstd2 = backend.allocate({rows}, DType::f32);
  a.pre_gelu = backend.allocate({rows, c.fc1_out()}, act);
  a.gelu = backend.allocate({rows, c.intermediate_size}, act);
  if (c.layer_scale) a.mlp_out = backend.allocate({rows, d}, act);
  a.cls_input = backend.allocate({b, d}, DType::f32);
  for (LinearSite site : all_linear_sites()) {
    if (lora.targets_site(site)) a.lora_low[static_cast<size_t>(site)] = backend.allocate({rows, lora.rank}, act);
  }
  return a;
}

BlockActivations BlockActivations::rows_for(const ViTConfig& c, int64_t b) const {
  const int64_t rows = b * c.tokens(), d = c.hidden_size, t = c.tokens();
  BlockActivations a;
  a.ln1 = prefix(ln1, {rows, d});
  a.mean1 = prefix(mean1, {rows});
  a.rstd1 = prefix(rstd1, {rows});
  a.qkv = prefix(qkv, {b, t, 3 * d});
  a.lse = prefix(lse, {b, c.num_attention_heads, t});
  a.attention = prefix(attention, {rows, d});
  a.attn_out = prefix(attn_out, {rows, d});
  a.mid = prefix(mid, {rows, d});
  a.ln2 = prefix(ln2, {rows, d});
  a.mean2 = prefix(mean2, {rows});
  a.rstd2 = prefix(rstd2, {rows});
  a.pre_gelu = prefix(pre_gelu, {rows, c.fc1_out()});
  a.gelu = prefix(gelu, {rows, c.intermediate_size});
  a.mlp_out = prefix(mlp_out, {rows, d});
  a.cls_input = prefix(cls_input, {b, d});
  for (size_t i = 0; i < lora_low.size(); ++i) {
    if (lora_low[i].numel()) a.lora_low[i] = prefix(lora_low[i], {rows, lora_low[i].dim(1)});
  }
  return a;
}

BlockActivations BlockActivations::classifier_token_rows(const ViTConfig& c, int64_t b) const {
  const int64_t d = c.hidden_size;
  BlockActivations a = rows_for(c, b);
  a.lse = prefix(lse, {b, c.num_attention_heads});
  a.attention = prefix(attention, {b, d});
  a.attn_out = prefix(attn_out, {b, d});
  a.mid = prefix(mid, {b, d});
  a.ln2 = prefix(ln2, {b, d});
  a.mean2 = prefix(mean2, {b});
  a.rstd2 = prefix(rstd2, {b});
  a.pre_gelu = prefix(pre_gelu, {b, c.fc1_out()});
  a.gelu = prefix(gelu, {b, c.intermediate_size});
  a.mlp_out = prefix(mlp_out, {b, d});
  for (LinearSite site : all_linear_sites()) {
    const Tensor& low = lora_low[static_cast<size_t>(site)];
    if (low.numel() && !is_qkv(site)) a.lora_low[static_cast<size_t>(site)] = prefix(low, {b, low.dim(1)});
  }
  return a;
}

size_t BlockActivations::bytes() const {
  size_t total = sum_bytes({&ln1, &mean1, &rstd1, &qkv, &lse, &attention, &attn_out, &mid, &ln2, &mean2, &rstd2,
                            &pre_gelu, &gelu, &mlp_out, &cls_input});
  for (const Tensor& low : lora_low) total += low.nbytes();
  return total;
}

EmbeddingActivations EmbeddingActivations::allocate(Backend& backend, const ViTConfig& c, int64_t b, DType act) {
  EmbeddingActivations a;
  a.patches = backend.allocate({b * c.num_patches(), c.patch_dim()}, act);
  a.projection = backend.allocate({b * c.num_patches(), c.hidden_size}, DType::f32);
  if (c.resamples_positions())
    a.positions = backend.allocate({c.positioned_prefix() + c.num_patches(), c.hidden_size}, DType::f32);
  return a;
}

EmbeddingActivations EmbeddingActivations::rows_for(const ViTConfig& c, int64_t b) const {
  EmbeddingActivations a;
  a.patches = prefix(patches, {b * c.num_patches(), c.patch_dim()});
  a.projection = prefix(projection, {b * c.num_patches(), c.hidden_size});
  a.positions = positions;
  return a;
}

size_t EmbeddingActivations::bytes() const { return sum_bytes({&patches, &projection, &positions}); }

namespace {

// Rows the head's LayerNorm sees.
int64_t head_rows(const ViTConfig& c, int64_t b) {
  switch (c.head) {
    case HeadKind::cls_token:
      return b;
    case HeadKind::cls_and_distillation:
      return 2 * b;
    case HeadKind::cls_and_patch_mean:
      return b * c.tokens();
  }
  return b;
}

}  // namespace

HeadActivations HeadActivations::allocate(Backend& backend, const ViTConfig& c, int64_t b) {
  const int64_t d = c.hidden_size, l = c.num_labels(), rows = head_rows(c, b);
  HeadActivations a;
  if (c.head != HeadKind::cls_and_patch_mean) {
    a.tokens = backend.allocate({rows, d}, DType::f32);
    a.grad_tokens = backend.allocate({rows, d}, DType::f32);
  }
  a.normed = backend.allocate({rows, d}, DType::f32);
  a.mean = backend.allocate({rows}, DType::f32);
  a.rstd = backend.allocate({rows}, DType::f32);
  if (c.head == HeadKind::cls_and_patch_mean) {
    a.features = backend.allocate({b, 2 * d}, DType::f32);
    a.grad_features = backend.allocate({b, 2 * d}, DType::f32);
  }
  a.logits = backend.allocate({b, l}, DType::f32);
  if (c.head == HeadKind::cls_and_distillation) a.half_logits = backend.allocate({b, l}, DType::f32);
  a.grad_logits = backend.allocate({b, l}, DType::f32);
  a.grad_normed = backend.allocate({rows, d}, DType::f32);
  return a;
}

HeadActivations HeadActivations::rows_for(const ViTConfig& c, int64_t b) const {
  const int64_t d = c.hidden_size, l = c.num_labels(), rows = head_rows(c, b);
  HeadActivations a;
  a.tokens = prefix(tokens, {rows, d});
  a.normed = prefix(normed, {rows, d});
  a.mean = prefix(mean, {rows});
  a.rstd = prefix(rstd, {rows});
  a.features = prefix(features, {b, 2 * d});
  a.logits = prefix(logits, {b, l});
  a.half_logits = prefix(half_logits, {b, l});
  a.grad_logits = prefix(grad_logits, {b, l});
  a.grad_features = prefix(grad_features, {b, 2 * d});
  a.grad_normed = prefix(grad_normed, {rows, d});
  a.grad_tokens = prefix(grad_tokens, {rows, d});
  return a;
}

size_t HeadActivations::bytes() const {
  return sum_bytes({&tokens, &normed, &mean, &rstd, &features, &logits, &half_logits, &grad_logits, &grad_features,
                    &grad_normed, &grad_tokens});
}

GradientWorkspace GradientWorkspace::allocate(Backend& backend, const ViTConfig& c, int64_t b, DType act,
                                              bool embeddings) {
  const int64_t rows = b * c.tokens(), d = c.hidden_size;
  GradientWorkspace w;
  if (act != DType::f32) w.residual_low = backend.allocate({rows, d}, act);
  w.ln = backend.allocate({rows, d}, act);
  w.attention = backend.allocate({rows, d}, act);
  w.qkv = backend.allocate({b, c.tokens(), 3 * d}, act);
  w.mlp = backend.allocate({rows, c.fc1_out()}, act);
  if (c.swiglu) w.gated = backend.allocate({rows, c.intermediate_size}, act);
  if (c.layer_scale) w.branch = backend.allocate({rows, d}, act);
  if (embeddings) w.patches = backend.allocate({b * c.num_patches(), d}, act);
  if (embeddings && c.resamples_positions()) {
    w.positions = backend.allocate({c.positioned_prefix() + c.num_patches(), d}, DType::f32);
  }
  w.scratch = backend.allocate({std::max<int64_t>(3 * d, c.fc1_out())}, DType::f32);
  return w;
}

GradientWorkspace GradientWorkspace::rows_for(const ViTConfig& c, int64_t b) const {
  const int64_t rows = b * c.tokens(), d = c.hidden_size;
  GradientWorkspace w;
  w.residual_low = prefix(residual_low, {rows, d});
  w.ln = prefix(ln, {rows, d});
  w.attention = prefix(attention, {rows, d});
  w.qkv = prefix(qkv, {b, c.tokens(), 3 * d});
  w.mlp = prefix(mlp, {rows, c.fc1_out()});
  w.gated = prefix(gated, {rows, c.intermediate_size});
  w.branch = prefix(branch, {rows, d});
  w.patches = prefix(patches, {b * c.num_patches(), d});
  w.positions = positions;
  w.scratch = scratch;
  return w;
}

size_t GradientWorkspace::bytes() const {
  return sum_bytes({&residual_low, &ln, &attention, &qkv, &mlp, &gated, &branch, &patches, &positions, &scratch});
}

}  // namespace vitpipe
