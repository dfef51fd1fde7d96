#include "model/block_parameters.h"

#include "util/error.h"

namespace vitpipe {

ParameterViews& ParameterViews::add(const ParameterLayout& layout, const Tensor& base, int64_t begin) {
  sources_.push_back({&layout, base, begin});
  return *this;
}

const ViTConfig& ParameterViews::config() const {
  VP_REQUIRE(!sources_.empty(), "internal: parameter views without a buffer");
  return sources_.front().layout->config();
}

const LoraSettings& ParameterViews::lora() const {
  VP_REQUIRE(!sources_.empty(), "internal: parameter views without a buffer");
  return sources_.front().layout->lora();
}

bool ParameterViews::holds(const std::string& name) const {
  for (const Source& s : sources_) {
    if (s.layout->find(name) != nullptr) return true;
  }
  return false;
}

Tensor ParameterViews::get(const std::string& name, const Shape& shape, int64_t numel_factor) const {
  for (const Source& s : sources_) {
    const ParamSpec* spec = s.layout->find(name);
    if (spec == nullptr) continue;
    const int64_t local = spec->offset - s.begin;
    const int64_t numel = spec->numel * numel_factor;
    VP_REQUIRE(local >= 0 && local + numel <= s.base.numel(), "parameter ", name, " is outside this stage's buffer");
    VP_REQUIRE(shape_numel(shape) == numel, "internal: view of ", name, " as ", shape_string(shape), " holds ", numel,
               " elements");
    return s.base.slice(local, local + numel).view(shape);
  }
  VP_REQUIRE(allow_missing_, "missing parameter ", name);
  return Tensor();
}

EmbeddingParameters embedding_parameters(const ParameterViews& v) {
  const ViTConfig& c = v.config();
  const int64_t d = c.hidden_size;
  const std::string e = model_prefix(c) + "embeddings.";
  EmbeddingParameters p;
  // CLS and the distillation or register tokens are adjacent in the layout: one [P, D] block.
  p.prefix = v.get(e + "cls_token", {c.prefix_tokens(), d}, c.prefix_tokens());
  p.position = v.get(e + "position_embeddings", {c.position_rows(), d});
  p.patch_weight = v.get(e + "patch_embeddings.projection.weight", {d, c.patch_dim()});
  p.patch_bias = v.get(e + "patch_embeddings.projection.bias", {d});
  return p;
}

BlockParameters block_parameters(const ParameterViews& v, int block) {
  const ViTConfig& c = v.config();
  const int64_t d = c.hidden_size, inner = c.intermediate_size;
  BlockParameters p;
  p.ln1_weight = v.get(norm1_module(c, block) + ".weight", {d});
  p.ln1_bias = v.get(norm1_module(c, block) + ".bias", {d});
  // query, key and value are adjacent in the layout: one [3D, D] matrix, and one [3D] bias.
  const std::string query = linear_module(c, block, LinearSite::query);
  p.qkv_weight = v.get(query + ".weight", {3 * d, d}, 3);
  if (c.qkv_bias) p.qkv_bias = v.get(query + ".bias", {3 * d}, 3);
  const std::string projection = linear_module(c, block, LinearSite::projection);
  p.out_weight = v.get(projection + ".weight", {d, d});
  p.out_bias = v.get(projection + ".bias", {d});
  if (c.layer_scale) {
    p.ls1 = v.get(layer_scale_module(c, block, 1) + ".lambda1", {d});
    p.ls2 = v.get(layer_scale_module(c, block, 2) + ".lambda1", {d});
  }
  p.ln2_weight = v.get(norm2_module(c, block) + ".weight", {d});
  p.ln2_bias = v.get(norm2_module(c, block) + ".bias", {d});
  const std::string fc1 = linear_module(c, block, LinearSite::fc1), fc2 = linear_module(c, block, LinearSite::fc2);
  p.fc1_weight = v.get(fc1 + ".weight", {c.fc1_out(), d});
  p.fc1_bias = v.get(fc1 + ".bias", {c.fc1_out()});
  p.fc2_weight = v.get(fc2 + ".weight", {d, inner});
  p.fc2_bias = v.get(fc2 + ".bias", {d});
  const LoraSettings& lora = v.lora();
  for (LinearSite site : all_linear_sites()) {
    if (!lora.targets_site(site)) continue;
    const std::string module = linear_module(c, block, site);
    LoraParameters& l = p.lora[static_cast<size_t>(site)];
    l.a = v.get(module + ".lora_A.weight", {lora.rank, linear_in_features(c, site)});
    l.b = v.get(module + ".lora_B.weight", {linear_out_features(c, site), lora.rank});
  }
  return p;
}

HeadParameters head_parameters(const ParameterViews& v) {
  const ViTConfig& c = v.config();
  const int64_t d = c.hidden_size;
  const std::string model = model_prefix(c);
  HeadParameters p;
  p.norm_weight = v.get(model + "layernorm.weight", {d});
  p.norm_bias = v.get(model + "layernorm.bias", {d});
  if (c.head == HeadKind::cls_and_distillation) {
    p.classifier_weight = v.get("cls_classifier.weight", {c.num_labels(), d});
    p.classifier_bias = v.get("cls_classifier.bias", {c.num_labels()});
    p.distillation_weight = v.get("distillation_classifier.weight", {c.num_labels(), d});
    p.distillation_bias = v.get("distillation_classifier.bias", {c.num_labels()});
  } else {
    p.classifier_weight = v.get("classifier.weight", {c.num_labels(), c.head_features()});
    p.classifier_bias = v.get("classifier.bias", {c.num_labels()});
  }
  return p;
}

}  // namespace vitpipe
