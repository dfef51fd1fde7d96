// LoRA's merge, peft's merge_and_unload: weight[out, in] += scale * b[out, r] . a[r, in], each sum in double and
// the weight rounded once. Shared by vitpipe's own export and by loading a peft adapter as a model.
#pragma once

#include "tensor/tensor.h"

namespace vitpipe {

// All f32; shapes must agree (checked).
void add_low_rank_update(const Tensor& weight, const Tensor& a, const Tensor& b, double scale);

}  // namespace vitpipe
