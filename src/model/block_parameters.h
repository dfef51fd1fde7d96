// Named views of one segment's parameters inside flat buffers (values, gradients or a bf16 copy of the values). A
// stage keeps its trainable and its frozen parameters in two buffers (model/trainable_set.h); ParameterViews looks
// a name up in whichever holds it. Gradient views come from the trainable buffer alone: a frozen parameter's
// gradient view is empty (numel 0), and the layers skip what would write it.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "model/parameter_layout.h"

namespace vitpipe {

class ParameterViews {
 public:
  // `base` holds the flat buffer (f32 or bf16) of `layout`'s segments, element 0 at layout offset `begin`.
  ParameterViews& add(const ParameterLayout& layout, const Tensor& base, int64_t begin);
  // Names no buffer holds give empty tensors instead of an error (gradients of frozen parameters).
  ParameterViews& allow_missing() {
    allow_missing_ = true;
    return *this;
  }
  const ViTConfig& config() const;
  const LoraSettings& lora() const;
  // The view of `name` (shape `shape`); numel_factor > 1 views `factor` adjacent parameters of the same size as one.
  Tensor get(const std::string& name, const Shape& shape, int64_t numel_factor = 1) const;
  bool holds(const std::string& name) const;

 private:
  struct Source {
    const ParameterLayout* layout;
    Tensor base;
    int64_t begin;
  };
  std::vector<Source> sources_;
  bool allow_missing_ = false;
};

struct EmbeddingParameters {
  Tensor prefix;        // [P, D]: CLS, then the distillation or register tokens
  Tensor position;      // [position_rows, D]: the checkpoint's grid
  Tensor patch_weight;  // [D, C*P*P]
  Tensor patch_bias;    // [D]
};

struct LoraParameters {
  Tensor a;  // [r, in]; empty when the layer has no LoRA
  Tensor b;  // [out, r]
  bool present() const { return a.numel() > 0; }
};

struct BlockParameters {
  Tensor ln1_weight, ln1_bias;         // [D]
  Tensor qkv_weight;                   // [3D, D]: query, key, value weights stacked (adjacent in the layout)
  Tensor qkv_bias;                     // [3D], empty when the config has qkv_bias = false
  Tensor out_weight, out_bias;         // [D, D], [D]
  Tensor ls1, ls2;                     // [D] LayerScale lambdas (DINOv2), empty otherwise
  Tensor ln2_weight, ln2_bias;         // [D]
  Tensor fc1_weight, fc1_bias;         // [fc1_out, D], [fc1_out] (SwiGLU: fc1_out = 2 * intermediate)
  Tensor fc2_weight, fc2_bias;         // [D, I], [D]
  std::array<LoraParameters, 6> lora;  // by LinearSite
  const LoraParameters& lora_at(LinearSite site) const { return lora[static_cast<size_t>(site)]; }
};

struct HeadParameters {
  Tensor norm_weight, norm_bias;  // [D]
  Tensor classifier_weight;       // [L, F]: F = D, or 2D for [CLS, patch mean] (DeiT with teacher: cls_classifier)
  Tensor classifier_bias;         // [L]
  Tensor distillation_weight;     // [L, D] DeiT with teacher's distillation_classifier, else empty
  Tensor distillation_bias;       // [L]
};

EmbeddingParameters embedding_parameters(const ParameterViews& views);
BlockParameters block_parameters(const ParameterViews& views, int block);
HeadParameters head_parameters(const ParameterViews& views);

}  // namespace vitpipe
