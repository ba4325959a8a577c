// Integer dot products of GGUF weight blocks with int8-quantized activations (ops/quant_act.h),
// chosen once at run time for the CPU: AVX-512 VNNI (vpdpbusd), AVX2 (vpmaddubsw), or portable C++.
// Every kernel computes, per block, the same exact integer sums (unsigned weight codes times the
// signed activations, the format's offset of 8 / 16 / 32, or 128 for Q8_0's top-bit-flipped codes
// on AVX-512, or its minimums subtracted through the activation sums), so the kernels differ only
// in the f32 order in which scaled block sums are added. tests/linear_quant_test.cc checks each against the plain reference.
#pragma once

#include <cstdint>

#include "tessera/quant.h"

namespace tessera::ops {

constexpr int kQuantDotTokens = 16;  // tokens per dot_rows_tokens call, at most, on any table

struct QuantDotKernels {
  const char* name;
  // Tokens per dot_rows_tokens call, at most (<= kQuantDotTokens): as many as the table's kernels
  // keep in registers for one pass over the rows.
  int max_tokens;
  // out[r] = sum over the nb blocks of weight row r (rows w_stride bytes apart, type t) times the
  // token's activation blocks xq (QuantizeActivations(t, ..., nb * QuantBlockElems(t), xq)), r < rows.
  void (*dot_rows)(QuantType t, const void* w, int64_t w_stride, int64_t rows, const void* xq, int64_t nb, float* out);
  // dot_rows for `tokens` (1..max_tokens) activation rows xq + i * xq_stride at once, token i's
  // outputs at out + i * out_stride: bit for bit dot_rows' per token, each weight block's codes
  // unpacked once for all of them where the table has such a kernel (a small batch then costs less
  // than tokens x one). Null: call dot_rows per token.
  void (*dot_rows_tokens)(QuantType t, const void* w, int64_t w_stride, int64_t rows, const void* xq,
                          int64_t xq_stride, int tokens, int64_t nb, float* out, int64_t out_stride);
  // QuantizeActivations (ops/quant_act.h), the same bytes.
  void (*quantize_act)(QuantType t, const float* x, int64_t in, void* dst);
  // DequantizeRow (tessera/quant.h), the same values bit for bit (the same f32 operations per value).
  void (*dequantize)(QuantType t, const void* src, float* dst, int64_t n);
  // Whether dot_rows_tokens for `tokens` (1..max_tokens) tokens of type t unpacks each block
  // once per pass of its kernel for all of that pass's tokens, reading each weight from memory once
  // for the whole call (else it runs dot_rows per token). Null: for no type.
  bool (*unpacks_once)(QuantType t, int tokens);
};

// Whether k's dot_rows_tokens unpacks type t's blocks once for `tokens` tokens.
inline bool UnpacksOnce(const QuantDotKernels& k, QuantType t, int tokens) {
  return k.unpacks_once && k.unpacks_once(t, tokens);
}

// The kernels to use: AVX-512 VNNI where the CPU has it, else AVX2, else generic.
// TESSERA_SIMD=generic|avx2 restricts the choice as for ops/simd.h; SetQuantDotForTesting overrides it.
const QuantDotKernels& QuantDot();
// Every implementation this CPU runs, best first (for tests and benchmarks).
int AvailableQuantDot(const QuantDotKernels** out, int max);
// For tests and benchmarks: makes QuantDot() return k (null: back to the CPU's choice).
void SetQuantDotForTesting(const QuantDotKernels* k);

// The implementations; the AVX ones only where the CPU has their ISA (null otherwise).
const QuantDotKernels& QuantDotGeneric();
const QuantDotKernels* QuantDotAvx2();    // AVX2 + FMA + F16C
const QuantDotKernels* QuantDotAvx512();  // AVX-512 F + BW + VL + VNNI

// The AVX tables, compiled with their ISA flags: call only after the CPU check above.
const QuantDotKernels& QuantDotAvx2Kernels();
const QuantDotKernels& QuantDotAvx512Kernels();

}  // namespace tessera::ops
