// The prefill GEMM on block-quantized weights with int8 activations: each token row is quantized
// per 32 values to int8 (as the decode row-dot quantizes it), each weight k block is unpacked once
// per call into panels of unsigned codes (16 rows x 4 bytes per k step, the layout vpdpbusd reads)
// with one scale a and one offset b per row and sub-block (w = a * code + b), and the micro-tile
// sums exact integer products per sub-block, then scales them in f32:
//   y[t][o] = sum over sub-blocks g of (a[o][g] * xd[t][g]) * isum[t][o][g] + b[o][g] * xs[t][g]
// where xd is the activation block's scale and xs = xd * (sum of the sub-block's activation codes).
// Sub-blocks are 32 values (16 for Q6_K, whose scales are per 16).
#pragma once

#include <cstdint>

#include "tessera/linear.h"
#include "tessera/quant.h"
#include "tessera/thread_pool.h"

namespace tessera::ops {

// Values per sub-block of type t (one a and b each): 16 for Q6_K, 32 for the others.
int64_t QuantGemmSubBlock(QuantType t);

// Whether QuantGemm runs on this CPU (AVX-512 VNNI; TESSERA_SIMD=avx2|generic turns it off) for
// weights of type t; otherwise Linear keeps the GEMM on dequantized f32 panels.
bool QuantGemmAvailable(QuantType t);

// For tests and benchmarks: false makes QuantGemmAvailable return false (true: back to the CPU's choice).
void EnableQuantGemm(bool on);

// Unpacks row `row` (type t, whole blocks k0 .. k0 + kc) into codes[kc] (unsigned, < 256) and,
// per sub-block g, a[g], b[g] with w = a * code + b for every value of the sub-block (a and b
// rounded to f32 as DequantizeRow rounds the format's d * sc and its offset).
void UnpackQuantCodes(QuantType t, const void* row, int64_t k0, int64_t kc, uint8_t* codes, float* a, float* b);

// y[t * y_stride + o] = x[t] . W[o] for t < n, o < w.out, as the header comment describes.
// scratch: at least n * GemmScratchWords(1, w.in) u32 words (the model's x_pairs scratch), 64-byte
// aligned; w.in whole blocks. Every token's result is the same whatever n and its position.
void QuantGemm(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
               ThreadPool* pool, uint32_t* scratch);

// The plain reference: each token quantized per 32 values by QuantizeActivations (as QuantGemm),
// the weights dequantized by DequantizeRow, the products of dequantized weights and quantized
// activations summed in double.
void QuantGemmReference(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y,
                        int64_t y_stride);

// The micro-tile (quant_gemm_avx512.cc): mr <= 6 tokens by two 16-row panels over kc values.
// codes: the two panels, [2][kc / 4][16][4] bytes; a, b: [2][kc / sub][16]; x[r]: token r's codes
// at this block, xd[r], xs[r] its per-sub-block scale and offset term; y[r * y_stride + c] for
// c < nr, added to when accumulate.
struct QuantTile {
  const int8_t* x[6];
  const float* xd[6];
  const float* xs[6];
};
void QuantGemmTileAvx512(const QuantTile& tile, int mr, const uint8_t* codes, const float* a, const float* b,
                         int64_t kc, int64_t sub, float* y, int64_t y_stride, int nr, bool accumulate);

}  // namespace tessera::ops
