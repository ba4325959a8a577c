// Intel AMX for Linear at precision bf16 on prepacked pair panels (WeightView::pairs).
// TDPBF16PS multiplies a tile of 16 token rows x 16 bf16 pairs by 16 pairs x 16 output columns
// into a 16 x 16 f32 tile per instruction. The operands are already in its layout: a weight's pair
// panels ([out / 16][pairs][16] words) are B tiles of 16 pair rows of 64 bytes, and the x rows
// rounded to pairs once per call (Gemm's x_pairs) are A tile rows of 32 bf16.
// The instruction does not round after each product as vdpbf16ps does (it keeps more of a step's
// sum before rounding), so its results differ from the dot-product kernels' in the last bits
// (docs/runtime.md, "AMX"). Each row's chain depends only on `in`, so a token's result is still
// the same bits alone or in any batch, as long as every token count takes this kernel.
#pragma once

#include <cstdint>

#include "tessera/gemm.h"

namespace tessera::ops {

// For r < rows, j < cols <= 16 * ceil(cols / 16) panels:
//   y[r * y_stride + j] = sum_{p < pairs} dot2(x[r * x_stride + p], panels[(j / 16) * pairs * 16 + p * 16 + j % 16])
// summed by tdpbf16ps in steps of 16 pairs in order (the last step zero-padded), C kept in f32
// between steps (k blocks pass it through y: exact), so a row's bits depend only on its data and `pairs`.
// x rows: `pairs` words read (the padding after them never); panels: the ceil(cols / 16) panels
// holding the columns (pairs * 16 words apart). Overwrites y (columns past cols untouched), or with
// accumulate adds to it: C starts from y's f32 values, so a depth split into calls gives the same
// bits as one call (the quantized path's per-block dequantized panels rely on this).
using Bf16AmxGemmFn = void (*)(const uint32_t* x, int64_t x_stride, int64_t rows, const uint32_t* panels,
                               int64_t pairs, int64_t cols, float* y, int64_t y_stride, bool accumulate);

// The kernel, or null where the CPU lacks AMX-BF16 and AMX-TILE, Linux refuses the tile data
// permission, the bf16 dot product is off (Bf16Dot() null: the panels and x pairs are its work),
// TESSERA_AMX=0 is set, or EnableBf16Amx(false) (tessera/gemm.h) was called.
Bf16AmxGemmFn Bf16Amx();

// Compiled with the AMX flags; call only when Bf16Amx() is not null.
void Bf16AmxGemm(const uint32_t* x, int64_t x_stride, int64_t rows, const uint32_t* panels, int64_t pairs,
                 int64_t cols, float* y, int64_t y_stride, bool accumulate);

}  // namespace tessera::ops
