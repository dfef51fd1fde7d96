// Named model shapes for `vitpipe init` and `vitpipe bench` (the same table as the PyTorch peer).
#pragma once

#include <string>
#include <vector>

#include "model/vit_config.h"

namespace vitpipe {

ViTConfig preset_config(const std::string& name);  // throws for an unknown name, listing the known ones
const std::vector<std::string>& preset_names();

}  // namespace vitpipe
