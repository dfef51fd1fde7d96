// A Backend tensor as the call builders see it: a contiguous row-major [rows, cols] matrix at `data`, an address in
// the memory the library will read (device memory on a GPU, host memory under the CPU interpreter).
#pragma once

#include <cstdint>

#include "backend/cuda/calls/element_type.h"

namespace vitpipe::cuda {

struct RowMajorMatrix {
  void* data = nullptr;
  int64_t rows = 0, cols = 0;
  ElementType type = ElementType::f32;
};

}  // namespace vitpipe::cuda
