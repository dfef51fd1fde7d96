#include "tensor/dtype.h"

#include <cstring>

namespace vitpipe {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::f64:
      return 8;
    case DType::i64:
      return 8;
    case DType::i32:
      return 4;
    case DType::u8:
      return 1;
    case DType::boolean:
      return 1;
    case DType::i16:
      return 2;
    case DType::i8:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::f64:
      return "F64";
    case DType::i64:
      return "I64";
    case DType::i32:
      return "I32";
    case DType::u8:
      return "U8";
    case DType::boolean:
      return "BOOL";
    case DType::i16:
      return "I16";
    case DType::i8:
      return "I8";
  }
  return "?";
}

bool parse_dtype(const std::string& name, DType* out) {
  static const struct {
    const char* name;
    DType dtype;
  } table[] = {{"F32", DType::f32}, {"BF16", DType::bf16}, {"F16", DType::f16}, {"F64", DType::f64},
               {"I64", DType::i64}, {"I32", DType::i32},   {"U8", DType::u8},   {"BOOL", DType::boolean},
               {"I16", DType::i16}, {"I8", DType::i8}};
  for (const auto& entry : table) {
    if (name == entry.name) {
      *out = entry.dtype;
      return true;
    }
  }
  return false;
}

uint16_t float_to_f16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow rounds to inf
  if (magnitude < 0x38800000u) {
    // Subnormal or zero in f16: shift the 24-bit significand into place with round to nearest even.
    if (magnitude < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t exponent = magnitude >> 23;
    uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exponent;  // 14 + (113 - exponent) ... brings it to 10 fractional bits
    uint32_t halfway = 1u << (shift - 1);
    uint32_t rounded = significand >> shift;
    uint32_t remainder = significand & ((1u << shift) - 1);
    if (remainder > halfway || (remainder == halfway && (rounded & 1u))) ++rounded;
    return static_cast<uint16_t>(sign | rounded);
  }
  uint32_t rounded = magnitude - 0x38000000u;  // rebias exponent 127 -> 15
  rounded += 0xfffu + ((rounded >> 13) & 1u);
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

float f16_to_float(uint16_t value) {
  uint32_t sign = static_cast<uint32_t>(value & 0x8000u) << 16;
  uint32_t exponent = (value >> 10) & 0x1fu;
  uint32_t fraction = value & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (fraction << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (fraction << 13);
  } else if (fraction == 0) {
    bits = sign;
  } else {
    // Subnormal: normalise.
    int shift = 0;
    while ((fraction & 0x400u) == 0) {
      fraction <<= 1;
      ++shift;
    }
    fraction &= 0x3ffu;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | (fraction << 13);
  }
  return std::bit_cast<float>(bits);
}

namespace {
constexpr size_t kParallelThreshold = 1 << 15;
}

void convert_f32_to_bf16(const float* src, uint16_t* dst, size_t count) {
#pragma omp parallel for simd schedule(static) if (count > kParallelThreshold)
  for (size_t i = 0; i < count; ++i) dst[i] = float_to_bf16(src[i]);
}

void convert_bf16_to_f32(const uint16_t* src, float* dst, size_t count) {
#pragma omp parallel for simd schedule(static) if (count > kParallelThreshold)
  for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_float(src[i]);
}

void convert_f32_to_f16(const float* src, uint16_t* dst, size_t count) {
#pragma omp parallel for schedule(static) if (count > kParallelThreshold)
  for (size_t i = 0; i < count; ++i) dst[i] = float_to_f16(src[i]);
}

void convert_f16_to_f32(const uint16_t* src, float* dst, size_t count) {
#pragma omp parallel for schedule(static) if (count > kParallelThreshold)
  for (size_t i = 0; i < count; ++i) dst[i] = f16_to_float(src[i]);
}

}  // namespace vitpipe
