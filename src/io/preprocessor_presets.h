// The preprocessing each model preset (model/presets.h) is published with: ViTImageProcessor's defaults for the ViT
// presets; BitImageProcessor as facebook/dinov2-* (shortest edge 256, crop 224, ImageNet mean/std) and
// microsoft/rad-dino (shortest edge 518, crop 518, mean 0.5307, std 0.2583) publish it.
#pragma once

#include <string>

#include "io/preprocessor_config.h"

namespace vitpipe {

PreprocessorConfig preset_preprocessor(const std::string& preset);

}  // namespace vitpipe
