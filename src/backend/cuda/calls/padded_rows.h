// How the CUDA backend stores a matrix that a cuBLASLt call reads or writes: rows padded to whole 16-byte units.
// A row-major matrix's row stride is its column-major leading dimension, and cuBLASLt's tensor-core kernels need
// leading dimensions of whole 16-byte units (gemm_rules.h). The model has rows that are not: 14 f32 logits
// (ChestX-ray14) take a stride of 16, DINOv2's 588 bf16 patch values (3 x 14 x 14) 592, LoRA's rank 4 in bf16 8.
// The padding lies outside every call (m, n and k stay the logical sizes, only the leading dimension grows), so no
// call reads or writes it and its contents never matter: nothing has to zero it.
#pragma once

#include <cstdint>

#include "backend/cuda/calls/gemm_rules.h"
#include "backend/cuda/calls/row_major_matrix.h"

namespace vitpipe::cuda {

// `cols` rounded up to whole 16-byte units of `type`.
constexpr int64_t padded_row_stride(int64_t cols, ElementType type) {
  const int64_t unit = kLibraryAlignmentBytes / element_bytes(type);
  return (cols + unit - 1) / unit * unit;
}

// A stride the library takes: whole 16-byte units (a padded matrix, or a column block of a wider padded one).
constexpr bool row_stride_fits_the_library(int64_t row_stride, ElementType type) {
  return row_stride * element_bytes(type) % kLibraryAlignmentBytes == 0;
}

// The [rows, cols] matrix at `data`, stored with padded rows (rows * padded_row_stride elements).
constexpr RowMajorMatrix padded_matrix(void* data, int64_t rows, int64_t cols, ElementType type) {
  return {data, rows, cols, type, padded_row_stride(cols, type)};
}

// Throws std::invalid_argument naming `name` and the stride to store it with when `m`'s rows are not padded: the
// call builders refuse to describe a call the library would refuse.
void require_padded_rows(const char* what, const char* name, const RowMajorMatrix& m);

}  // namespace vitpipe::cuda
