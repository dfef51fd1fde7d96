// What every layer function needs besides its tensors.
#pragma once

#include "backend/backend.h"
#include "model/parameter_layout.h"
#include "model/precision.h"
#include "model/vit_config.h"

namespace vitpipe {

struct LayerContext {
  Backend& backend;
  const ViTConfig& config;
  Precision precision;
  double lora_scale = 0.0;  // alpha / r when the layout has LoRA matrices
  bool inference = false;   // forward only: nothing is kept for a backward pass, so epilogues may fuse further
  DType act() const { return compute_dtype(precision); }
  bool low_precision() const { return precision != Precision::fp32; }
};

}  // namespace vitpipe
