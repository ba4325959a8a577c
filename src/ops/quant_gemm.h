// The prefill GEMM on block-quantized weights with two-byte int8 activations: each token row is
// quantized per 32 values to int8 (q_hi, as the decode row-dot quantizes it, scale d) and its
// residual again to int8 (q_lo, scale d / 256), so x ~ d / 256 (256 q_hi + q_lo) within d / 256:
// 2^-15 of the block's largest magnitude, near f32 (one int8 would be 2^-8 of it; that changes
// logits well past the bf16 rounding's effect, docs/quantization.md). Each weight k block is
// unpacked once per call into panels of unsigned codes (16 rows x 4 bytes per k step, the layout
// vpdpbusd reads) with a scale a and an offset b per row and sub-block (w = a * code + b); the
// micro-tile sums exact integer products per sub-block, isum = 256 codes.q_hi + codes.q_lo, then
// scales them in f32:
//   y[t][o] = sum over sub-blocks g of (a[o][g] * xd[t][g]) * isum[t][o][g] + b[o][g] * xs[t][g]
// where xd = d / 256 and xs = xd * (256 sum(q_hi) + sum(q_lo)) over the sub-block. Sub-blocks are
// 32 values (16 for Q6_K, whose scales are per 16). Where b = -2^c a (Q4_0, Q5_0, Q8_0, Q6_K: the
// codes' offset times the scale; QuantGemmXsScale) the scratch holds xs scaled by -2^c and each term is
//   a[o][g] * (xd[t][g] * isum[t][o][g] + xs[t][g]),
// one f32 product per term fewer: the micro-tile's f32 steps compete with vpdpbusd for the same
// execution units (bench/results/quant_prefill_zen4.md, "Offsets folded into xs").
// With one activation byte (precision int8, llama.cpp's numerics) each row is quantized exactly as
// the decode row-dot quantizes it (QuantizeActivations: per 32 values, per 256 for the K-quants),
// q_lo is not read, isum = codes.q_hi, xd = d and xs = d sum(q_hi) (times -2^c where the offsets
// fold): half the vpdpbusd of two bytes.
#pragma once

#include <cstdint>

#include "ops/quant_act.h"
#include "tessera/gemm.h"
#include "tessera/linear.h"
#include "tessera/quant.h"
#include "tessera/thread_pool.h"

namespace tessera::ops {

// Values per sub-block of type t (one a and b each): 16 for Q6_K, 32 for the others.
int64_t QuantGemmSubBlock(QuantType t);

// Whether QuantGemm runs on this CPU (AVX-512 VNNI; TESSERA_SIMD=avx2|generic turns it off) for
// weights of type t; otherwise Linear keeps the GEMM on dequantized f32 panels.
bool QuantGemmAvailable(QuantType t);

// Unpacks row `row` (type t, whole blocks k0 .. k0 + kc) into codes[kc] (unsigned, < 256) and,
// per sub-block g, a[g], b[g] with w = a * code + b for every value of the sub-block (a and b
// rounded to f32 as DequantizeRow rounds the format's d * sc and its offset).
// codes may be null: a and b only. This is the plain reference of UnpackCodesAvx512.
void UnpackQuantCodes(QuantType t, const void* row, int64_t k0, int64_t kc, uint8_t* codes, float* a, float* b);

// UnpackQuantCodes' codes, the same bytes, in AVX-512 BW/VL registers (quant_gemm_avx512.cc; only on
// CPUs where QuantGemm runs): packing the panels is the GEMM's per-call cost before any token.
void UnpackCodesAvx512(QuantType t, const void* row, int64_t k0, int64_t kc, uint8_t* codes);

// UnpackQuantCodes' a and b for rows r < rows of type t of a panel (row r at row0 + r * row_bytes;
// rows <= 16, lanes past rows 0), in the panel layout a[g][16], b[g][16], g < kc / sub, bit for bit;
// b only where the micro-tile reads it (QuantGemmXsScale(t) == 1: Q4_1, Q5_1, Q4_K, Q5_K), the
// others' b = QuantGemmXsScale(t) a being folded into the activations' xs:
// with the codes, packing the panels is the GEMM's per-call cost before any token, which short
// prompts feel (bench/results/quant_prefill.md, "The int8 GEMM's panels on AVX-512").
void UnpackScalesAvx512(QuantType t, const void* row0, int64_t row_bytes, int rows, int64_t k0, int64_t kc, float* a,
                        float* b);

// panel[k4][r][0..3] = rows[r * stride + 4 k4 .. 4 k4 + 3] for r < 16, k4 < kc / 4: sixteen rows of
// codes into the panel layout the micro-tile reads (kc a multiple of 16: whole blocks).
void TransposeCodesAvx512(const uint8_t* rows, int64_t stride, int64_t kc, uint8_t* panel);

// Bytes of one token row of the activations in the scratch: q_hi[in], q_lo[in], xd[in / 32],
// xs[in / sub] (room for sub = 16), in 64-byte lines. GemmScratchWords(1, in) covers it.
int64_t QuantGemmRowBytes(int64_t in);

// A token row's two bytes from its q_hi blocks (QuantizeActivations' Q8_0 blocks of x, nb of them):
// hi = the blocks' q; lo = the residual x - d q_hi in steps of dl = d / 256, rounded to nearest
// even and clamped to +-127 (0 where dl is not > 0); xd[j] = dl; xs per sub-block of `sub` (16 or
// 32) values = dl (256 sum(q_hi) + sum(q_lo)) times xs_scale (1, or -2^c: QuantGemmXsScale). The
// plain reference of QuantizeResidualAvx512, which gives the same bytes and floats and is what
// QuantGemm runs.
void QuantizeResidual(const float* x, const ActBlock32* blocks, int64_t nb, int64_t sub, int8_t* hi, int8_t* lo,
                      float* xd, float* xs, float xs_scale);
void QuantizeResidualAvx512(const float* x, const ActBlock32* blocks, int64_t nb, int64_t sub, int8_t* hi,
                            int8_t* lo, float* xd, float* xs, float xs_scale);

// What QuantGemm scales xs by for weights of type t: -2^c where their offsets are b = -2^c a
// (Q4_0 -8, Q5_0 -16, Q8_0 -128, Q6_K -32), folded into xs as above; 1 for the types with
// minimums of their own (Q4_1, Q5_1, Q4_K, Q5_K), whose b stays in the micro-tile.
float QuantGemmXsScale(QuantType t);

// Bytes per activation value: two (q_hi, q_lo; near f32) or one (q_hi; the row-dot's numerics).
enum class QuantActBytes { kTwo, kOne };

// y[t * y_stride + o] = x[t] . W[o] for t < n, o < w.out, as the header comment describes.
// scratch: GemmScratchWords(n, w.in) u32 words (the model's x_pairs scratch), 64-byte aligned;
// w.in whole blocks. Every token's result is the same whatever n and its position.
// x_ready: the scratch already holds these n rows of x as this call would quantize them (the call
// before took the same x, n and width, and SameQuantizedX says its weights quantize x alike).
void QuantGemm(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
               ThreadPool* pool, uint32_t* scratch, QuantActBytes bytes = QuantActBytes::kTwo, bool x_ready = false);

// Whether the scratch rows QuantGemm quantizes for weights of type a serve weights of type b too.
bool SameQuantizedX(QuantType a, QuantType b, QuantActBytes bytes);

// Tokens per micro-tile at most.
constexpr int kQuantTileTokens = 4;

// The micro-tile (quant_gemm_avx512.cc): mr <= kQuantTileTokens tokens by two 16-row panels over kc values.
// codes: the two panels, [2][kc / 4][16][4] bytes; a, b: [2][kc / sub][16]; hi[r], lo[r]: token
// r's codes at this block (lo unread with one byte), xd[r] its per-32 scales (d / 256, or d with
// one byte), xs[r] its per-sub-block offset terms; y[r * y_stride + c] for c < nr, added to when
// accumulate. centered: the weights' offsets are folded into xs (QuantGemmXsScale != 1; b unread).
struct QuantTile {
  const int8_t* hi[kQuantTileTokens];
  const int8_t* lo[kQuantTileTokens];
  const float* xd[kQuantTileTokens];
  const float* xs[kQuantTileTokens];
};
void QuantGemmTileAvx512(const QuantTile& tile, int mr, const uint8_t* codes, const float* a, const float* b,
                         int64_t kc, int64_t sub, float* y, int64_t y_stride, int nr, bool accumulate,
                         QuantActBytes bytes = QuantActBytes::kTwo, bool centered = false);

// Tokens per AMX micro-tile: full tiles of 16 take it, the rest of a token range the VNNI tile.
// QuantGemmAmxActive / EnableQuantGemmAmx (tessera/gemm.h) say whether whole tiles of this many
// tokens run on QuantGemmTileAmx.
constexpr int kQuantAmxTokens = 16;

// kQuantAmxTokens token rows of QuantGemm's activation scratch from row0 (stride bytes apart, a
// multiple of 64), of a weight `in` values deep, at the k block starting at k0.
struct QuantAmxRows {
  const char* row0;
  int64_t stride, in, k0;
};

// The micro-tile on AMX (quant_gemm_amx.cc): kQuantAmxTokens tokens by one 16-row panel over kc
// values. codes: the panel, [kc / 4][16][4] bytes; a, b: [kc / sub][16]; y[r * y_stride + c] for
// c < nr, added to when accumulate. The same bits as QuantGemmTileAvx512 on those tokens and rows.
// Loads its own tile configuration; QuantAmxRelease() frees the tile state after the last call.
void QuantGemmTileAmx(const QuantAmxRows& x, const uint8_t* codes, const float* a, const float* b, int64_t kc,
                      int64_t sub, float* y, int64_t y_stride, int nr, bool accumulate, bool centered = false);
void QuantAmxRelease();

// CPUID AMX-TILE and AMX-INT8, the tile data permission, and TESSERA_AMX not 0 (simd_dispatch.cc,
// which reads them once for both AMX kernels).
bool AmxInt8Usable();

}  // namespace tessera::ops
