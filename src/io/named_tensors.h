// Tensors by name: what checkpoint files hold (safetensors, pytorch_model.bin) before they meet the model's layout.
#pragma once

#include <map>
#include <string>

#include "tensor/tensor.h"

namespace vitpipe {

using TensorMap = std::map<std::string, Tensor>;
using StringMap = std::map<std::string, std::string>;

}  // namespace vitpipe
