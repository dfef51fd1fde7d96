// Element types and the scalar conversions between them. bf16 and f16 are storage formats: arithmetic is fp32.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

namespace vitpipe {

enum class DType : uint8_t { f32, bf16, f16, f64, i64, i32, u8, boolean, i16, i8 };

size_t dtype_size(DType dtype);
// safetensors spelling: "F32", "BF16", "F16", "F64", "I64", "I32", "U8", "BOOL", "I16", "I8".
const char* dtype_name(DType dtype);
bool parse_dtype(const std::string& name, DType* out);  // false for an unknown name

// Round to nearest even, as torch and oneDNN do; NaN stays NaN.
inline uint16_t float_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float bf16_to_float(uint16_t value) { return std::bit_cast<float>(static_cast<uint32_t>(value) << 16); }

uint16_t float_to_f16(float value);  // IEEE binary16, round to nearest even, overflow to inf
float f16_to_float(uint16_t value);

// Bulk conversions (OpenMP-parallel for large counts).
void convert_f32_to_bf16(const float* src, uint16_t* dst, size_t count);
void convert_bf16_to_f32(const uint16_t* src, float* dst, size_t count);
void convert_f32_to_f16(const float* src, uint16_t* dst, size_t count);
void convert_f16_to_f32(const uint16_t* src, float* dst, size_t count);

}  // namespace vitpipe
