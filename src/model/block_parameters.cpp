#include "model/block_parameters.h"

#include "util/error.h"

namespace vitpipe {
namespace {

Tensor view(const ParameterLayout& layout, const std::string& name, const Tensor& base, int64_t begin,
            const Shape& shape, int64_t numel_factor = 1) {
  const ParamSpec* spec = layout.find(name);
  VP_REQUIRE(spec != nullptr, "missing parameter ", name);
  const int64_t local = spec->offset - begin;
  const int64_t numel = spec->numel * numel_factor;
  VP_REQUIRE(local >= 0 && local + numel <= base.numel(), "parameter ", name, " is outside this stage's buffer");
  return base.slice(local, local + numel).view(shape);
}

}  // namespace

EmbeddingParameters embedding_parameters(const ParameterLayout& layout, const Tensor& base, int64_t begin) {
  const ViTConfig& c = layout.config();
  const int64_t d = c.hidden_size;
  EmbeddingParameters p;
  p.cls = view(layout, "vit.embeddings.cls_token", base, begin, {d});
  p.position = view(layout, "vit.embeddings.position_embeddings", base, begin, {c.tokens(), d});
  p.patch_weight = view(layout, "vit.embeddings.patch_embeddings.projection.weight", base, begin, {d, c.patch_dim()});
  p.patch_bias = view(layout, "vit.embeddings.patch_embeddings.projection.bias", base, begin, {d});
  return p;
}

BlockParameters block_parameters(const ParameterLayout& layout, int block, const Tensor& base, int64_t begin) {
  const ViTConfig& c = layout.config();
  const int64_t d = c.hidden_size, inner = c.intermediate_size;
  const std::string prefix = concat("vit.encoder.layer.", block, ".");
  BlockParameters p;
  p.ln1_weight = view(layout, prefix + "layernorm_before.weight", base, begin, {d});
  p.ln1_bias = view(layout, prefix + "layernorm_before.bias", base, begin, {d});
  // query, key and value are adjacent in the layout: one [3D, D] matrix, and one [3D] bias.
  p.qkv_weight = view(layout, prefix + "attention.attention.query.weight", base, begin, {3 * d, d}, 3);
  if (c.qkv_bias) p.qkv_bias = view(layout, prefix + "attention.attention.query.bias", base, begin, {3 * d}, 3);
  p.out_weight = view(layout, prefix + "attention.output.dense.weight", base, begin, {d, d});
  p.out_bias = view(layout, prefix + "attention.output.dense.bias", base, begin, {d});
  p.ln2_weight = view(layout, prefix + "layernorm_after.weight", base, begin, {d});
  p.ln2_bias = view(layout, prefix + "layernorm_after.bias", base, begin, {d});
  p.fc1_weight = view(layout, prefix + "intermediate.dense.weight", base, begin, {inner, d});
  p.fc1_bias = view(layout, prefix + "intermediate.dense.bias", base, begin, {inner});
  p.fc2_weight = view(layout, prefix + "output.dense.weight", base, begin, {d, inner});
  p.fc2_bias = view(layout, prefix + "output.dense.bias", base, begin, {d});
  return p;
}

HeadParameters head_parameters(const ParameterLayout& layout, const Tensor& base, int64_t begin) {
  const ViTConfig& c = layout.config();
  const int64_t d = c.hidden_size;
  HeadParameters p;
  p.norm_weight = view(layout, "vit.layernorm.weight", base, begin, {d});
  p.norm_bias = view(layout, "vit.layernorm.bias", base, begin, {d});
  p.classifier_weight = view(layout, "classifier.weight", base, begin, {c.num_labels(), d});
  p.classifier_bias = view(layout, "classifier.bias", base, begin, {c.num_labels()});
  return p;
}

}  // namespace vitpipe
