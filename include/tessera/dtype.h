// Element types and exact conversions. bf16 and f16 are stored as raw uint16_t bit patterns;
// f32 -> bf16/f16 rounds to nearest, ties to even; NaN stays NaN; overflow goes to +-inf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tessera {

enum class DType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

inline size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }
const char* DTypeName(DType t);
// Parses "f32"/"float32", "bf16"/"bfloat16", "f16"/"float16". Returns false for anything else.
bool ParseDType(std::string_view name, DType* out);

inline float Bf16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

// Decodes n elements of type `t` at `src` into f32 `dst`.
void DecodeToF32(DType t, const void* src, float* dst, size_t n);
// Encodes n f32 values into type `t` (rounding to nearest even).
void EncodeFromF32(DType t, const float* src, void* dst, size_t n);

// Converts n elements between any two types (through f32; exact when widening).
void ConvertDType(DType from, const void* src, DType to, void* dst, size_t n);

// The index of the first NaN or +-inf among n elements of type `t` at `data`, or -1 when all are
// finite. Tests exponent bits with integer ops, so it runs at memory speed.
int64_t FirstNonFinite(DType t, const void* data, int64_t n);

}  // namespace tessera
