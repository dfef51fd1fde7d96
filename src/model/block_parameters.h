// Named views of one segment's parameters inside a flat buffer (values, gradients or a bf16 copy of the values).
#pragma once

#include "model/parameter_layout.h"

namespace vitpipe {

struct EmbeddingParameters {
  Tensor cls;           // [D]
  Tensor position;      // [T, D]
  Tensor patch_weight;  // [D, C*P*P]
  Tensor patch_bias;    // [D]
};

struct BlockParameters {
  Tensor ln1_weight, ln1_bias;  // [D]
  Tensor qkv_weight;            // [3D, D]: query, key, value weights stacked (adjacent in the layout)
  Tensor qkv_bias;              // [3D], undefined when the config has qkv_bias = false
  Tensor out_weight, out_bias;  // [D, D], [D]
  Tensor ln2_weight, ln2_bias;  // [D]
  Tensor fc1_weight, fc1_bias;  // [I, D], [I]
  Tensor fc2_weight, fc2_bias;  // [D, I], [D]
};

struct HeadParameters {
  Tensor norm_weight, norm_bias;  // [D]
  Tensor classifier_weight;       // [L, D]
  Tensor classifier_bias;         // [L]
};

// `base` holds the flat buffer (f32 or bf16) whose element 0 is the layout offset `begin`.
EmbeddingParameters embedding_parameters(const ParameterLayout& layout, const Tensor& base, int64_t begin);
BlockParameters block_parameters(const ParameterLayout& layout, int block, const Tensor& base, int64_t begin);
HeadParameters head_parameters(const ParameterLayout& layout, const Tensor& base, int64_t begin);

}  // namespace vitpipe
