// Every parameter of a ...ForImageClassification, by its Hugging Face name (model/model_family.h), at a fixed offset
// in one flat fp32 buffer (llm.c style). Segments are the pipeline's units: 0 = embeddings, 1..L = encoder blocks,
// L+1 = final LayerNorm + classifier. Each segment's parameters are contiguous, so a pipeline stage, an optimizer or
// a gradient bucket works on a plain [begin, end) range. Within a block q/k/v weights (then biases) are adjacent,
// which makes them one fused [3D, D] projection; in the embeddings the CLS token and the distillation or register
// tokens are adjacent (one [P, D] block of prefix tokens).
//
// LoRA (peft) adds lora_A [r, in] and lora_B [out, r] beside each targeted linear layer, in its block's segment.
//
// A subset layout (ParameterLayout(full, keep)) holds some of a full layout's specs at compact offsets, with the same
// segments (some possibly empty): the trainable parameters (their values, gradients and optimizer state live in
// buffers of that layout, so frozen ones get none) and the frozen ones.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/model_family.h"
#include "model/vit_config.h"
#include "tensor/tensor.h"

namespace vitpipe {

class Backend;

enum class ParamKind { linear_weight, bias, norm_weight, norm_bias, token, layer_scale, lora_a, lora_b };

struct ParamSpec {
  std::string name;  // e.g. "vit.encoder.layer.3.attention.attention.query.weight"
  Shape shape;
  int64_t offset = 0;  // elements from the start of this layout's buffer
  int64_t numel = 0;
  int segment = 0;
  ParamKind kind = ParamKind::linear_weight;
  int64_t full_offset = 0;  // offset in the full layout (equal to `offset` there)
  // transformers' usual fine-tuning recipe: no weight decay on biases, norms, tokens, position embeddings; timm's
  // for LayerScale (1-D). LoRA matrices decay like the weights they adapt.
  bool decays() const {
    return kind == ParamKind::linear_weight || kind == ParamKind::lora_a || kind == ParamKind::lora_b;
  }
  bool is_lora() const { return kind == ParamKind::lora_a || kind == ParamKind::lora_b; }
};

// LoRA as peft's LoraConfig: rank r, lora_alpha, the targeted layers of every block; scale = alpha / r.
struct LoraSettings {
  int64_t rank = 0;  // 0 = no LoRA
  double alpha = 8.0;
  std::vector<LinearSite> targets;
  bool enabled() const { return rank > 0; }
  double scale() const { return alpha / static_cast<double>(rank); }
  bool targets_site(LinearSite site) const;
  bool operator==(const LoraSettings&) const = default;
};

class ParameterLayout {
 public:
  explicit ParameterLayout(const ViTConfig& config, const LoraSettings& lora = {});
  // The specs of `full` for which keep(spec) holds, at compact offsets, same segments.
  ParameterLayout(const ParameterLayout& full, const std::function<bool(const ParamSpec&)>& keep);

  const ViTConfig& config() const { return config_; }
  const LoraSettings& lora() const { return lora_; }
  bool is_subset() const { return subset_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t numel() const { return segment_offsets_.back(); }
  int num_segments() const { return static_cast<int>(segment_offsets_.size()) - 1; }
  int64_t segment_begin(int segment) const { return segment_offsets_.at(static_cast<size_t>(segment)); }
  int64_t segment_end(int segment) const { return segment_offsets_.at(static_cast<size_t>(segment) + 1); }
  const ParamSpec* find(std::string_view name) const;  // nullptr when absent

  // The order of the Hugging Face model's state_dict() (module registration order) for the base parameters (LoRA
  // matrices excluded): save_model writes in it so shards are cut where transformers would cut them.
  std::vector<std::string> state_dict_order() const;

 private:
  ViTConfig config_;
  LoraSettings lora_;
  bool subset_ = false;
  std::vector<ParamSpec> specs_;
  std::vector<int64_t> segment_offsets_;           // num_segments + 1 entries
  std::unordered_map<std::string, size_t> index_;  // name -> specs_ entry
  void build_index();
};

// The values (or gradients, or optimizer moments) of segments [first, last] in one aligned fp32 allocation.
class FlatParameters {
 public:
  FlatParameters() = default;
  // Zeroed. `backend` (optional): in that backend's memory (a GPU's for a CUDA stage; the host then reaches it only
  // through the backend's copies, and data() / at() refuse it); none: host memory.
  FlatParameters(std::shared_ptr<const ParameterLayout> layout, int first_segment, int last_segment,
                 Backend* backend = nullptr);
  // Elements [begin, end) (model offsets) of that range only: an optimizer shard's moments (ZeRO-1). Parameters
  // that straddle its ends are not held (tensor() refuses them); data() and at() address the slice.
  FlatParameters(std::shared_ptr<const ParameterLayout> layout, int first_segment, int last_segment, int64_t begin,
                 int64_t end, Backend* backend = nullptr);
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

// Copies every parameter `to` holds from `from` by name (both may be subsets or full layouts). `from` must hold
// them all, unless `only_present` (then those it lacks, e.g. LoRA matrices of a base model, are left as they are).
void copy_parameters(const FlatParameters& from, const FlatParameters& to, bool only_present = false);

}  // namespace vitpipe
