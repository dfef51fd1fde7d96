// Named model shapes for `vitpipe init` and `vitpipe bench` (ViT: the same table as the PyTorch peer). The DINOv2
// ones are the released checkpoints' shapes: facebook/dinov2-small and -base (patch 14, position grid 37 x 37 for
// 518 px, images fed at 224 by their BitImageProcessor) and microsoft/rad-dino (ViT-B/14 at 518 px). Their
// preprocessing: io/preprocessor_presets.h.
#pragma once

#include <string>
#include <vector>

#include "model/vit_config.h"

namespace vitpipe {

ViTConfig preset_config(const std::string& name);  // throws for an unknown name, listing the known ones
const std::vector<std::string>& preset_names();

}  // namespace vitpipe
