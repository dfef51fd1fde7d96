// Every parameter of a ViTForImageClassification, by its Hugging Face name, at a fixed offset in one flat fp32
// buffer (llm.c style). Segments are the pipeline's units: 0 = embeddings, 1..L = encoder blocks, L+1 = final
// LayerNorm + classifier. Each segment's parameters are contiguous, so a pipeline stage, an optimizer or a
// gradient bucket works on a plain [begin, end) range. Within a block q/k/v weights (then biases) are adjacent,
// which makes them one fused [3D, D] projection.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/vit_config.h"
#include "tensor/tensor.h"

namespace vitpipe {

enum class ParamKind { linear_weight, bias, norm_weight, norm_bias, token };

struct ParamSpec {
  std::string name;  // e.g. "vit.encoder.layer.3.attention.attention.query.weight"
  Shape shape;
  int64_t offset = 0;  // elements from the start of the whole model's buffer
  int64_t numel = 0;
  int segment = 0;
  ParamKind kind = ParamKind::linear_weight;
  // transformers' usual fine-tuning recipe: no weight decay on biases, norms, CLS token, position embeddings.
  bool decays() const { return kind == ParamKind::linear_weight; }
};

class ParameterLayout {
 public:
  explicit ParameterLayout(const ViTConfig& config);

  const ViTConfig& config() const { return config_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t numel() const { return segment_offsets_.back(); }
  int num_segments() const { return static_cast<int>(segment_offsets_.size()) - 1; }
  int64_t segment_begin(int segment) const { return segment_offsets_.at(static_cast<size_t>(segment)); }
  int64_t segment_end(int segment) const { return segment_offsets_.at(static_cast<size_t>(segment) + 1); }
  const ParamSpec* find(std::string_view name) const;  // nullptr when absent

 private:
  ViTConfig config_;
  std::vector<ParamSpec> specs_;
  std::vector<int64_t> segment_offsets_;  // num_segments + 1 entries
};

// The values (or gradients, or optimizer moments) of segments [first, last] in one aligned fp32 allocation.
class FlatParameters {
 public:
  FlatParameters() = default;
  FlatParameters(std::shared_ptr<const ParameterLayout> layout, int first_segment, int last_segment);
  // Elements [begin, end) (model offsets) of that range only: an optimizer shard's moments (ZeRO-1). Parameters
  // that straddle its ends are not held (tensor() refuses them); data() and at() address the slice.
  FlatParameters(std::shared_ptr<const ParameterLayout> layout, int first_segment, int last_segment, int64_t begin,
                 int64_t end);
  static FlatParameters whole_model(std::shared_ptr<const ParameterLayout> layout);

  const ParameterLayout& layout() const { return *layout_; }
  std::shared_ptr<const ParameterLayout> layout_ptr() const { return layout_; }
  int first_segment() const { return first_; }
  int last_segment() const { return last_; }
  int64_t begin() const { return begin_; }  // offset of flat()[0] in the whole model
  int64_t numel() const { return flat_.numel(); }
  const Tensor& flat() const { return flat_; }
  float* data() const { return flat_.f32(); }

  bool holds(const ParamSpec& spec) const {
    return spec.segment >= first_ && spec.segment <= last_ && spec.offset >= begin_ &&
           spec.offset + spec.numel <= begin_ + numel();
  }
  Tensor tensor(const ParamSpec& spec) const;  // a view with the parameter's shape
  Tensor tensor(std::string_view name) const;
  float* at(int64_t model_offset) const { return data() + (model_offset - begin_); }
  // The specs this range holds, in layout order.
  std::vector<const ParamSpec*> held_specs() const;

 private:
  std::shared_ptr<const ParameterLayout> layout_;
  int first_ = 0;
  int last_ = -1;
  int64_t begin_ = 0;
  Tensor flat_;
};

}  // namespace vitpipe
