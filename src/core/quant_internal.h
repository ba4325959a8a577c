// Per-format block routines behind quant.h's dispatchers. nb is a count of blocks. Every routine
// follows ggml's reference code operation by operation (see docs/quantization.md), so that both the
// dequantized floats and the quantized bytes equal llama.cpp's.
#pragma once

#include <cstdint>
#include <cstring>

#include "tessera/quant.h"

namespace tessera::quant_detail {

// ggml's nearest_int: round to nearest (ties to even) by adding 1.5 * 2^23 and reading the low
// mantissa bits. Exact for |v| < 2^22; beyond that it wraps as ggml's does (no UB either way).
inline int NearestInt(float v) {
  float biased = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &biased, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// A float -> integer conversion that truncates toward zero like C's cast, but gives x86's
// "integer indefinite" INT32_MIN for NaN and out-of-range values instead of undefined behaviour.
// ggml's reference quantizers cast floats to int8_t; x86 compilers emit exactly this conversion.
inline int32_t TruncToInt32(float v) {
  if (!(v > -2147483904.f && v < 2147483648.f)) return INT32_MIN;
  return static_cast<int32_t>(v);
}

// Blocks are copied in and out whole: a mapped tensor need not be aligned for the structs' halves
// (GGUF's alignment field may be as small as 1), and the copy costs nothing next to the arithmetic.
template <class Block>
Block LoadBlock(const void* base, int64_t i) {
  Block b;
  std::memcpy(&b, static_cast<const uint8_t*>(base) + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}
template <class Block>
void StoreBlock(void* base, int64_t i, const Block& b) {
  std::memcpy(static_cast<uint8_t*>(base) + i * static_cast<int64_t>(sizeof(Block)), &b, sizeof(Block));
}

void DequantizeQ4_0(const void* x, float* y, int64_t nb);
void DequantizeQ5_0(const void* x, float* y, int64_t nb);
void DequantizeQ4_1(const void* x, float* y, int64_t nb);
void DequantizeQ5_1(const void* x, float* y, int64_t nb);
void DequantizeQ8_0(const void* x, float* y, int64_t nb);
void DequantizeQ4_K(const void* x, float* y, int64_t nb);
void DequantizeQ5_K(const void* x, float* y, int64_t nb);
void DequantizeQ6_K(const void* x, float* y, int64_t nb);

void QuantizeQ4_0(const float* x, void* y, int64_t nb);
void QuantizeQ5_0(const float* x, void* y, int64_t nb);
void QuantizeQ4_1(const float* x, void* y, int64_t nb);
void QuantizeQ5_1(const float* x, void* y, int64_t nb);
void QuantizeQ8_0(const float* x, void* y, int64_t nb);
void QuantizeQ4_K(const float* x, void* y, int64_t nb);
void QuantizeQ5_K(const float* x, void* y, int64_t nb);
void QuantizeQ6_K(const float* x, void* y, int64_t nb);

}  // namespace tessera::quant_detail
