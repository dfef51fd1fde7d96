// A Backend tensor as the call builders see it: a row-major [rows, cols] matrix at `data`, an address in the memory
// the library will read (device memory on a GPU, host memory under the CPU interpreter); contiguous, or a column
// block of a wider tensor (LoRA's slice of the fused q|k|v projection) with rows `row_stride` elements apart.
#pragma once

#include <cstdint>

#include "backend/cuda/calls/element_type.h"

namespace vitpipe::cuda {

struct RowMajorMatrix {
  void* data = nullptr;
  int64_t rows = 0, cols = 0;
  ElementType type = ElementType::f32;
  int64_t row_stride = 0;  // 0: cols (contiguous)
  int64_t stride() const { return row_stride != 0 ? row_stride : cols; }
};

}  // namespace vitpipe::cuda
