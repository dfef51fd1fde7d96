// Floating-point operations of a ViT pass as vitpipe executes it, counted from the GEMMs (2 per multiply-add);
// elementwise work is not counted. The final block computes the classifier token's path only
// (model/classifier_token_block.h) when the head reads token 0 alone, so it counts its q/k/v projection for every
// token and the rest for one. LoRA's thin GEMMs are counted too.
// A training step costs forward + backward = 3x the forward GEMMs.
#pragma once

#include <cstdint>

#include "model/parameter_layout.h"
#include "model/vit_config.h"

namespace vitpipe {

struct FlopCount {
  double linear = 0;     // patch embedding, q/k/v/o, MLP, classifier
  double attention = 0;  // Q.K^T and P.V
  double total() const { return linear + attention; }
};

FlopCount forward_flops_per_image(const ViTConfig& config, const LoraSettings& lora = {});
// The same pass with every block computed for every token (as eager PyTorch and transformers run it).
FlopCount full_model_forward_flops_per_image(const ViTConfig& config, const LoraSettings& lora = {});

}  // namespace vitpipe
