// Blocked GEMM for prefill-sized Linear calls: y[n, out] = x[n, in] W[out, in]^T with W in f32,
// bf16 or f16. Weight panels are widened to f32 once per block into a packed [k][16] layout on the
// stack and reused by every token of the block, so the micro-tile (src/ops/simd.h gemm_tile) runs at
// the FMA rate instead of the weight-streaming rate of the row-dot path. At precision bf16 on CPUs
// with AVX-512-BF16, bf16 weights are packed as pair panels instead and the tile is the dot
// product's (src/ops/bf16_dot.h pv_tile), at twice the FMA rate; a weight whose panels were packed at
// load (WeightView::pairs, PackPairPanels) skips the per-call packing, and Linear then sends it
// every token count (decode included). At precision f32 the same holds for f32 panels packed at
// load (WeightView::panels, PackF32Panels): the GEMM reads its blocks in place.
// Block-quantized weights (WeightView::quant) are dequantized per block (whole quant blocks per k
// block) into the f32 panels, or at precision bf16 on CPUs with the dot product into bf16 pair
// panels (the weights then rounded to bf16 like x). On CPUs with Intel AMX, precision bf16 with the
// x pairs scratch goes to AMX tiles instead (src/ops/bf16_amx.h): prepacked panels read in place,
// other weights packed per block.
#pragma once

#include <cstdint>

#include "tessera/linear.h"
#include "tessera/thread_pool.h"

namespace tessera::ops {

// Same contract as Linear (tessera/linear.h). Work is split over blocks of output columns and, when
// there are too few of those for the pool, over token ranges. Allocates nothing.
// At precision bf16 (bf16 weights only) each token's result is the same whatever n or position.
// With w.pairs set and x_pairs given (precision bf16, CPUs with the dot product), or w.panels set
// (the f32 micro-tiles), the micro-tiles read the prepacked panels directly; otherwise weight
// blocks are packed per call. At precision f32 each token's result is the same whatever n.
// x_pairs (optional, GemmScratchWords(n, in) words, 64-byte aligned): at precision bf16, x is
// rounded into it once per call, as bf16 pairs on the dot-product path and as bf16 values that the
// f32 tiles widen on CPUs without the dot product; without it each block of output columns rounds
// the x rows of its tiles again (out / 32-128 passes over x; the cost is in
// bench/results/kernel_choices.md, "Rounding x once" and "The wide f32 tile in Linear"). The
// results are the same bit for bit either way.
void Gemm(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
          ThreadPool* pool, MatmulPrecision precision = MatmulPrecision::kF32, uint32_t* x_pairs = nullptr);

// Words of the x_pairs scratch for n tokens of `in` features (rows padded to 64 bytes).
int64_t GemmScratchWords(int64_t n, int64_t in);

// Words of a [out, in] matrix's pair panels (WeightView::pairs): ceil(out / 16) * ceil(in / 2) * 16.
int64_t PairPanelWords(int64_t out, int64_t in);
// Packs bf16 w (w.data, [out, in]) into dst (PairPanelWords(w.out, w.in) words, 64-byte aligned)
// as WeightView::pairs: dst[(c * pairs + p) * 16 + j] = (w[16c + j][2p], w[16c + j][2p + 1]), 0 past
// out and in. False (dst untouched) where the CPU lacks the bf16 dot product or w is not bf16.
bool PackPairPanels(const WeightView& w, uint32_t* dst);
// Floats of a [out, in] matrix's f32 panels (WeightView::panels): ceil(out / 16) * in * 16.
int64_t F32PanelFloats(int64_t out, int64_t in);
// Packs w (w.data, [out, in], f32 / bf16 / f16) into dst (F32PanelFloats(w.out, w.in) floats,
// 64-byte aligned) as WeightView::panels, widened to f32: dst[(c * in + k) * 16 + j] =
// w[16c + j][k], 0 past out.
void PackF32Panels(const WeightView& w, float* dst);
// Row r of a matrix of `in` columns from its f32 panels: dst[i] = w[r][i] for i < in.
void F32PanelRowToF32(const float* panels, int64_t in, int64_t r, float* dst);
// Row r of a matrix of `in` columns from its pair panels, as f32: dst[i] = w[r][i] for i < in (an
// embedding lookup on a tied embedding whose stored rows were released after packing).
void PairPanelRowToF32(const uint32_t* panels, int64_t in, int64_t r, float* dst);

// Whether precision bf16 (with the x pairs scratch) runs on AMX tiles now: the CPU has AMX-BF16,
// Linux granted the tile state, TESSERA_AMX=0 is not set, and neither switch below is off.
bool Bf16AmxActive();
// For tests and benchmarks: off sends precision bf16 back to the AVX-512-BF16 dot-product kernels
// (their results differ from AMX's in the last bits). On by default.
void EnableBf16Amx(bool on);
// The fewest tokens for which Linear runs quantized weights at precision bf16 on AMX tiles (each
// block of weights dequantized to bf16 pair panels; fewer: the int8 GEMM or the row-dot path).
int64_t QuantAmxMinTokens();
// Whether the int8 GEMM of quantized prefill (any precision below QuantAmxMinTokens, every token
// count from 12 at precision f32) runs its 16-token tiles on AMX-INT8 tiles: the CPU has AMX-TILE
// and AMX-INT8, Linux granted the tile state, TESSERA_AMX=0 is not set and the switch is on. Its
// results are the AVX-512 VNNI tile's bits (both sum exact integers), so the switch changes speed
// only. For tests and benchmarks; on by default.
bool QuantGemmAmxActive();
void EnableQuantGemmAmx(bool on);

}  // namespace tessera::ops
