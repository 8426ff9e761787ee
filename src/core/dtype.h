// Element types hlx stores and computes with, and exact conversions between the 16-bit floats and f32.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace hlx {

enum class DType : uint8_t { kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kI1 };

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI64, DType::kI32,
                                       DType::kI16, DType::kI8,  DType::kU8,   DType::kI1};

// Bytes per element; i1 is stored as one byte holding 0 or 1.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
      return 2;
    case DType::kI64:
      return 8;
    case DType::kI8:
    case DType::kU8:
    case DType::kI1:
      return 1;
  }
  return 0;
}
constexpr bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }
constexpr bool is_integer(DType t) { return !is_float(t) && t != DType::kI1; }
constexpr bool is_unsigned(DType t) { return t == DType::kU8; }
// Bit width of integer types (i1 -> 1).
constexpr int dtype_bits(DType t) { return t == DType::kI1 ? 1 : int(dtype_size(t) * 8); }

// MLIR spelling: "f32", "bf16", "ui8", "i1", ...
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
// safetensors spelling: "F32", "BF16", "U8", "BOOL", ...
std::string_view dtype_safetensors_name(DType t);
std::optional<DType> dtype_from_safetensors_name(std::string_view name);

// 16-bit float storage types. Arithmetic happens in f32.
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_f32(bf16 h) { return f32_from_bits(uint32_t(h.bits) << 16); }
// Round to nearest, ties to even; NaN stays NaN (quiet), infinities stay infinite.
inline bf16 f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

float f16_to_f32(f16 h);
// Round to nearest, ties to even, with correct subnormals, overflow to infinity and NaN.
f16 f32_to_f16(float f);

}  // namespace hlx
