// Block-quantized weight formats with the GGUF (ggml) block layouts, so a GGUF file's tensors are
// used where they are mapped. A row of n values is n / QuantBlockElems(t) blocks stored back to
// back; a [out, in] matrix is `out` such rows. Every layout below is byte-for-byte ggml's.
#pragma once

#include <cstdint>
#include <string_view>

namespace tessera {

enum class QuantType : int {
  kNone = 0,  // not block-quantized: the element type (DType) says what the data is
  kQ4_0,      // 32 values: f16 scale d, 4-bit q; x = d * (q - 8)
  kQ5_0,      // 32 values: f16 scale d, 5-bit q; x = d * (q - 16)
  kQ8_0,      // 32 values: f16 scale d, 8-bit q; x = d * q
  kQ4_K,      // 256 values: f16 d, dmin; 8 sub-blocks of 32 with 6-bit scale and min; x = d*sc*q - dmin*m
  kQ5_K,      // as Q4_K with a fifth bit per value
  kQ6_K,      // 256 values: f16 d; 16 sub-blocks of 16 with int8 scale; x = d * sc * (q - 32)
  kQ4_1,      // 32 values: f16 scale d and minimum m, 4-bit q; x = d * q + m
  kQ5_1,      // 32 values: f16 scale d and minimum m, 5-bit q; x = d * q + m
};

// The block structs. Halves (ggml_half) are raw f16 bit patterns (tessera/dtype.h F16ToF32).
// The structs need 2-byte alignment; the functions below do not (they copy blocks), so they read a
// mapped tensor at any offset. Code that casts mapped bytes to a struct must check the alignment.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];  // value j (< 16) in the low nibble of qs[j], value j + 16 in its high nibble
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];   // bit j of the little-endian uint32 is the fifth bit of value j
  uint8_t qs[16];  // low four bits as in Q4_0
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];  // as in Q4_0
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];   // as in Q5_0
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];  // eight 6-bit scales and eight 6-bit mins, packed as ggml packs them
  uint8_t qs[128];     // 4 chunks of 64 values: value l of the chunk's first 32 in qs[32c + l] low nibble
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// Values per block (32 or 256) and bytes per block; 0 for kNone.
int64_t QuantBlockElems(QuantType t);
int64_t QuantBlockBytes(QuantType t);
// Bytes of a row of n values; n must be a multiple of QuantBlockElems(t) (-1 otherwise).
int64_t QuantRowBytes(QuantType t, int64_t n);
// "q4_0", "q5_0", "q8_0", "q4_k", "q5_k", "q6_k", "q4_1", "q5_1" ("none" for kNone).
const char* QuantTypeName(QuantType t);
// Parses the names above, case-insensitively. False for anything else (kNone included).
bool ParseQuantType(std::string_view name, QuantType* out);

// dst[0, n) = the values of the row at src (n a multiple of the block size). The reference: plain
// scalar code in ggml's evaluation order, so results are exactly ggml's dequantization.
// For these three functions a type of kNone or a ragged n is a caller bug (TESSERA_CHECK); validate
// shapes with QuantRowBytes first.
void DequantizeRow(QuantType t, const void* src, float* dst, int64_t n);
// Quantizes n values (a multiple of the block size) into blocks at dst, as llama.cpp's reference
// quantizers do without an importance matrix, so the bytes equal its quantizer's for the same input.
// Give it finite values (FirstNonFinite in dtype.h): on NaN or inf it writes what ggml writes, which
// may hide them (a NaN can become a zero level; an inf in Q6_K can leave every scale finite).
void QuantizeRow(QuantType t, const float* src, void* dst, int64_t n);

// The index of the first block among the n values at src whose scale fields are NaN or +-inf, or -1.
// (Quantized values are integers; only the f16 scales can be non-finite.)
int64_t FirstNonFiniteBlock(QuantType t, const void* src, int64_t n);

}  // namespace tessera
