// Reading and writing one element of a described tensor in host memory, for the CPU interpreters.
#pragma once

#include <cstdint>

#include "backend/cuda/calls/element_type.h"
#include "tensor/dtype.h"

namespace vitpipe::cuda {

inline float load_element(const void* base, ElementType type, int64_t index) {
  if (type == ElementType::f32) return static_cast<const float*>(base)[index];
  return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
}

// Rounds once, to nearest even, as the libraries' epilogues do.
inline void store_element(void* base, ElementType type, int64_t index, double value) {
  if (type == ElementType::f32) {
    static_cast<float*>(base)[index] = static_cast<float>(value);
  } else {
    static_cast<uint16_t*>(base)[index] = float_to_bf16(static_cast<float>(value));
  }
}

inline const void* offset_bytes(const void* base, int64_t elements, ElementType type) {
  return static_cast<const char*>(base) + elements * element_bytes(type);
}
inline void* offset_bytes(void* base, int64_t elements, ElementType type) {
  return static_cast<char*>(base) + elements * element_bytes(type);
}

}  // namespace vitpipe::cuda
