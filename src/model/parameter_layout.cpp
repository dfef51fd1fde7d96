#include "model/parameter_layout.h"

#include "util/error.h"

namespace vitpipe {

ParameterLayout::ParameterLayout(const ViTConfig& config) : config_(config) {
  const int64_t d = config.hidden_size;
  const int64_t layers = config.num_hidden_layers;
  int64_t offset = 0;
  int segment = 0;
  segment_offsets_.push_back(0);
  auto add = [&](std::string name, Shape shape, ParamKind kind) {
    ParamSpec spec;
    spec.name = std::move(name);
    spec.numel = shape_numel(shape);
    spec.shape = std::move(shape);
    spec.offset = offset;
    spec.segment = segment;
    spec.kind = kind;
    offset += spec.numel;
    specs_.push_back(std::move(spec));
  };
  auto end_segment = [&] {
    segment_offsets_.push_back(offset);
    ++segment;
  };

  add("vit.embeddings.cls_token", {1, 1, d}, ParamKind::token);
  add("vit.embeddings.position_embeddings", {1, config.tokens(), d}, ParamKind::token);
  add("vit.embeddings.patch_embeddings.projection.weight",
      {d, config.num_channels, config.patch_size, config.patch_size}, ParamKind::linear_weight);
  add("vit.embeddings.patch_embeddings.projection.bias", {d}, ParamKind::bias);
  end_segment();

  for (int64_t l = 0; l < layers; ++l) {
    const std::string block = concat("vit.encoder.layer.", l, ".");
    add(block + "layernorm_before.weight", {d}, ParamKind::norm_weight);
    add(block + "layernorm_before.bias", {d}, ParamKind::norm_bias);
    for (const char* which : {"query", "key", "value"}) {
      add(block + "attention.attention." + which + ".weight", {d, d}, ParamKind::linear_weight);
    }
    if (config.qkv_bias) {
      for (const char* which : {"query", "key", "value"}) {
        add(block + "attention.attention." + which + ".bias", {d}, ParamKind::bias);
      }
    }
    add(block + "attention.output.dense.weight", {d, d}, ParamKind::linear_weight);
    add(block + "attention.output.dense.bias", {d}, ParamKind::bias);
    add(block + "layernorm_after.weight", {d}, ParamKind::norm_weight);
    add(block + "layernorm_after.bias", {d}, ParamKind::norm_bias);
    add(block + "intermediate.dense.weight", {config.intermediate_size, d}, ParamKind::linear_weight);
    add(block + "intermediate.dense.bias", {config.intermediate_size}, ParamKind::bias);
    add(block + "output.dense.weight", {d, config.intermediate_size}, ParamKind::linear_weight);
    add(block + "output.dense.bias", {d}, ParamKind::bias);
    end_segment();
  }

  add("vit.layernorm.weight", {d}, ParamKind::norm_weight);
  add("vit.layernorm.bias", {d}, ParamKind::norm_bias);
  add("classifier.weight", {config.num_labels(), d}, ParamKind::linear_weight);
  add("classifier.bias", {config.num_labels()}, ParamKind::bias);
  end_segment();
}

const ParamSpec* ParameterLayout::find(std::string_view name) const {
  for (const auto& spec : specs_) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

FlatParameters::FlatParameters(std::shared_ptr<const ParameterLayout> layout, int first_segment, int last_segment)
    : layout_(std::move(layout)), first_(first_segment), last_(last_segment) {
  VP_REQUIRE(0 <= first_ && first_ <= last_ && last_ < layout_->num_segments(), "segment range [", first_, ", ", last_,
             "] is outside the model's ", layout_->num_segments(), " segments");
  begin_ = layout_->segment_begin(first_);
  flat_ = Tensor::zeros({layout_->segment_end(last_) - begin_});
}

FlatParameters::FlatParameters(std::shared_ptr<const ParameterLayout> layout, int first_segment, int last_segment,
                               int64_t begin, int64_t end)
    : layout_(std::move(layout)), first_(first_segment), last_(last_segment) {
  VP_REQUIRE(0 <= first_ && first_ <= last_ && last_ < layout_->num_segments(), "segment range [", first_, ", ", last_,
             "] is outside the model's ", layout_->num_segments(), " segments");
  VP_REQUIRE(layout_->segment_begin(first_) <= begin && begin <= end && end <= layout_->segment_end(last_),
             "elements [", begin, ", ", end, ") are outside segments [", first_, ", ", last_, "]");
  begin_ = begin;
  flat_ = Tensor::zeros({end - begin});
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

}  // namespace vitpipe
