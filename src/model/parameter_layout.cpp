#include "model/parameter_layout.h"

#include <algorithm>
#include <cstring>

#include "backend/backend.h"
#include "util/error.h"

namespace vitpipe {

bool LoraSettings::targets_site(LinearSite site) const {
  return enabled() && std::find(targets.begin(), targets.end(), site) != targets.end();
}

ParameterLayout::ParameterLayout(const ViTConfig& config, const LoraSettings& lora) : config_(config), lora_(lora) {
  const ViTConfig& c = config;
  const int64_t d = c.hidden_size;
  const std::string model = model_prefix(c);
  int64_t offset = 0;
  int segment = 0;
  segment_offsets_.push_back(0);
  auto add = [&](std::string name, Shape shape, ParamKind kind) {
    ParamSpec spec;
    spec.name = std::move(name);
    spec.numel = shape_numel(shape);
    spec.shape = std::move(shape);
    spec.offset = spec.full_offset = offset;
    spec.segment = segment;
    spec.kind = kind;
    offset += spec.numel;
    specs_.push_back(std::move(spec));
  };
  auto end_segment = [&] {
    segment_offsets_.push_back(offset);
    ++segment;
  };

  // Embeddings: the prefix tokens adjacent (one [P, D] block), then what the forward pass does not read.
  const std::string embeddings = model + "embeddings.";
  add(embeddings + "cls_token", {1, 1, d}, ParamKind::token);
  if (c.distillation_token) add(embeddings + "distillation_token", {1, 1, d}, ParamKind::token);
  if (c.num_register_tokens > 0) {
    add(embeddings + "register_tokens", {1, c.num_register_tokens, d}, ParamKind::token);
  }
  if (c.mask_token) add(embeddings + "mask_token", {1, d}, ParamKind::token);
  add(embeddings + "position_embeddings", {1, c.position_rows(), d}, ParamKind::token);
  add(embeddings + "patch_embeddings.projection.weight", {d, c.num_channels, c.patch_size, c.patch_size},
      ParamKind::linear_weight);
  add(embeddings + "patch_embeddings.projection.bias", {d}, ParamKind::bias);
  end_segment();

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    add(norm1_module(c, l) + ".weight", {d}, ParamKind::norm_weight);
    add(norm1_module(c, l) + ".bias", {d}, ParamKind::norm_bias);
    for (LinearSite site : {LinearSite::query, LinearSite::key, LinearSite::value}) {
      add(linear_module(c, l, site) + ".weight", {d, d}, ParamKind::linear_weight);
    }
    if (c.qkv_bias) {
      for (LinearSite site : {LinearSite::query, LinearSite::key, LinearSite::value}) {
        add(linear_module(c, l, site) + ".bias", {d}, ParamKind::bias);
      }
    }
    add(linear_module(c, l, LinearSite::projection) + ".weight", {d, d}, ParamKind::linear_weight);
    add(linear_module(c, l, LinearSite::projection) + ".bias", {d}, ParamKind::bias);
    if (c.layer_scale) add(layer_scale_module(c, l, 1) + ".lambda1", {d}, ParamKind::layer_scale);
    add(norm2_module(c, l) + ".weight", {d}, ParamKind::norm_weight);
    add(norm2_module(c, l) + ".bias", {d}, ParamKind::norm_bias);
    add(linear_module(c, l, LinearSite::fc1) + ".weight", {c.fc1_out(), d}, ParamKind::linear_weight);
    add(linear_module(c, l, LinearSite::fc1) + ".bias", {c.fc1_out()}, ParamKind::bias);
    add(linear_module(c, l, LinearSite::fc2) + ".weight", {d, c.intermediate_size}, ParamKind::linear_weight);
    add(linear_module(c, l, LinearSite::fc2) + ".bias", {d}, ParamKind::bias);
    if (c.layer_scale) add(layer_scale_module(c, l, 2) + ".lambda1", {d}, ParamKind::layer_scale);
    for (LinearSite site : all_linear_sites()) {
      if (!lora.targets_site(site)) continue;
      const std::string module = linear_module(c, l, site);
      add(module + ".lora_A.weight", {lora.rank, linear_in_features(c, site)}, ParamKind::lora_a);
      add(module + ".lora_B.weight", {linear_out_features(c, site), lora.rank}, ParamKind::lora_b);
    }
    end_segment();
  }

  add(model + "layernorm.weight", {d}, ParamKind::norm_weight);
  add(model + "layernorm.bias", {d}, ParamKind::norm_bias);
  if (c.head == HeadKind::cls_and_distillation) {
    for (const char* head : {"cls_classifier", "distillation_classifier"}) {
      add(concat(head, ".weight"), {c.num_labels(), d}, ParamKind::linear_weight);
      add(concat(head, ".bias"), {c.num_labels()}, ParamKind::bias);
    }
  } else {
    add("classifier.weight", {c.num_labels(), c.head_features()}, ParamKind::linear_weight);
    add("classifier.bias", {c.num_labels()}, ParamKind::bias);
  }
  end_segment();
  build_index();
}

ParameterLayout::ParameterLayout(const ParameterLayout& full, const std::function<bool(const ParamSpec&)>& keep)
    : config_(full.config_), lora_(full.lora_), subset_(true) {
  int64_t offset = 0;
  segment_offsets_.push_back(0);
  size_t next = 0;
  for (int segment = 0; segment < full.num_segments(); ++segment) {
    for (; next < full.specs_.size() && full.specs_[next].segment == segment; ++next) {
      const ParamSpec& spec = full.specs_[next];
      if (!keep(spec)) continue;
      ParamSpec kept = spec;
      kept.offset = offset;
      offset += kept.numel;
      specs_.push_back(std::move(kept));
    }
    segment_offsets_.push_back(offset);
  }
  build_index();
}

void ParameterLayout::build_index() {
  for (size_t i = 0; i < specs_.size(); ++i) {
    VP_REQUIRE(index_.emplace(specs_[i].name, i).second, "internal: parameter ", specs_[i].name, " appears twice");
  }
}

const ParamSpec* ParameterLayout::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &specs_[it->second];
}

std::vector<std::string> ParameterLayout::state_dict_order() const {
  const ViTConfig& c = config_;
  const std::string model = model_prefix(c);
  const std::string embeddings = model + "embeddings.";
  std::vector<std::string> names = {embeddings + "cls_token"};
  if (c.distillation_token) names.push_back(embeddings + "distillation_token");
  if (c.mask_token) names.push_back(embeddings + "mask_token");
  if (c.num_register_tokens > 0) names.push_back(embeddings + "register_tokens");
  for (const char* name :
       {"position_embeddings", "patch_embeddings.projection.weight", "patch_embeddings.projection.bias"}) {
    names.push_back(embeddings + name);
  }
  auto linear = [&](int64_t l, LinearSite site, bool bias = true) {
    names.push_back(linear_module(c, l, site) + ".weight");
    if (bias) names.push_back(linear_module(c, l, site) + ".bias");
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.dinov2_family()) {  // Dinov2Layer: norm1, attention, layer_scale1, norm2, mlp, layer_scale2
      names.push_back(norm1_module(c, l) + ".weight");
      names.push_back(norm1_module(c, l) + ".bias");
    }
    for (LinearSite site : {LinearSite::query, LinearSite::key, LinearSite::value}) linear(l, site, c.qkv_bias);
    linear(l, LinearSite::projection);
    if (c.dinov2_family()) {
      if (c.layer_scale) names.push_back(layer_scale_module(c, l, 1) + ".lambda1");
      names.push_back(norm2_module(c, l) + ".weight");
      names.push_back(norm2_module(c, l) + ".bias");
      linear(l, LinearSite::fc1);
      linear(l, LinearSite::fc2);
      if (c.layer_scale) names.push_back(layer_scale_module(c, l, 2) + ".lambda1");
    } else {  // ViTLayer: attention, intermediate, output, layernorm_before, layernorm_after
      linear(l, LinearSite::fc1);
      linear(l, LinearSite::fc2);
      for (const std::string& norm : {norm1_module(c, l), norm2_module(c, l)}) {
        names.push_back(norm + ".weight");
        names.push_back(norm + ".bias");
      }
    }
  }
  names.push_back(model + "layernorm.weight");
  names.push_back(model + "layernorm.bias");
  if (c.head == HeadKind::cls_and_distillation) {
    for (const char* name : {"cls_classifier.weight", "cls_classifier.bias", "distillation_classifier.weight",
                             "distillation_classifier.bias"}) {
      names.push_back(name);
    }
  } else {
    names.push_back("classifier.weight");
    names.push_back("classifier.bias");
  }
  size_t base = 0;
  for (const auto& spec : specs_) base += spec.is_lora() ? 0 : 1;
  VP_REQUIRE(subset_ || names.size() == base, "internal: state dict order lists ", names.size(),
             " parameters, the layout ", base);
  return names;
}

FlatParameters::FlatParameters(std::shared_ptr<const ParameterLayout> layout, int first_segment, int last_segment,
                               Backend* backend)
    : layout_(std::move(layout)), first_(first_segment), last_(last_segment) {
  VP_REQUIRE(0 <= first_ && first_ <= last_ && last_ < layout_->num_segments(), "segment range [", first_, ", ", last_,
             "] is outside the model's ", layout_->num_segments(), " segments");
  begin_ = layout_->segment_begin(first_);
  const Shape shape{layout_->segment_end(last_) - begin_};
  flat_ = backend != nullptr ? allocate_zeros(*backend, shape) : Tensor::zeros(shape);
}

FlatParameters::FlatParameters(std::shared_ptr<const ParameterLayout> layout, int first_segment, int last_segment,
                               int64_t begin, int64_t end, Backend* backend)
    : layout_(std::move(layout)), first_(first_segment), last_(last_segment) {
  VP_REQUIRE(0 <= first_ && first_ <= last_ && last_ < layout_->num_segments(), "segment range [", first_, ", ", last_,
             "] is outside the model's ", layout_->num_segments(), " segments");
  VP_REQUIRE(layout_->segment_begin(first_) <= begin && begin <= end && end <= layout_->segment_end(last_),
             "elements [", begin, ", ", end, ") are outside segments [", first_, ", ", last_, "]");
  begin_ = begin;
  flat_ = backend != nullptr ? allocate_zeros(*backend, {end - begin}) : Tensor::zeros({end - begin});
}

FlatParameters FlatParameters::whole_model(std::shared_ptr<const ParameterLayout> layout) {
  int last = layout->num_segments() - 1;
  return FlatParameters(std::move(layout), 0, last);
}

Tensor FlatParameters::tensor(const ParamSpec& spec) const {
  VP_REQUIRE(holds(spec), "parameter ", spec.name, " is not held by segments [", first_, ", ", last_, "]");
  int64_t local = spec.offset - begin_;
  return flat_.slice(local, local + spec.numel).view(spec.shape);
}

Tensor FlatParameters::tensor(std::string_view name) const {
  const ParamSpec* spec = layout_->find(name);
  VP_REQUIRE(spec != nullptr, "no parameter named ", name);
  return tensor(*spec);
}

std::vector<const ParamSpec*> FlatParameters::held_specs() const {
  std::vector<const ParamSpec*> held;
  for (const auto& spec : layout_->specs()) {
    if (holds(spec)) held.push_back(&spec);
  }
  return held;
}

void copy_parameters(const FlatParameters& from, const FlatParameters& to, bool only_present) {
  for (const ParamSpec* spec : to.held_specs()) {
    const ParamSpec* source = from.layout().find(spec->name);
    if (only_present && (source == nullptr || !from.holds(*source))) continue;
    VP_REQUIRE(source != nullptr && from.holds(*source) && source->numel == spec->numel,
               "copy_parameters: ", spec->name, " is not held by the source");
    std::memcpy(to.at(spec->offset), from.at(source->offset), static_cast<size_t>(spec->numel) * sizeof(float));
  }
}

}  // namespace vitpipe
