// Floating-point operations of a ViT pass, counted from the GEMMs (2 per multiply-add); elementwise work is not
// counted. A training step costs forward + backward = 3x the forward GEMMs.
#pragma once

#include <cstdint>

#include "model/vit_config.h"

namespace vitpipe {

struct FlopCount {
  double linear = 0;     // patch embedding, q/k/v/o, MLP, classifier
  double attention = 0;  // Q.K^T and P.V
  double total() const { return linear + attention; }
};

FlopCount forward_flops_per_image(const ViTConfig& config);

}  // namespace vitpipe
