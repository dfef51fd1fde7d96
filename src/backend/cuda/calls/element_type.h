// The element types the CUDA libraries' calls are described in (cudaDataType_t's CUDA_R_32F and CUDA_R_16BF). Plain
// C++: the descriptions and their CPU interpreter build without CUDA headers.
#pragma once

#include <cstdint>

namespace vitpipe::cuda {

enum class ElementType : uint8_t { f32, bf16 };

constexpr int64_t element_bytes(ElementType type) { return type == ElementType::f32 ? 4 : 2; }
constexpr const char* element_type_name(ElementType type) { return type == ElementType::f32 ? "f32" : "bf16"; }

}  // namespace vitpipe::cuda
