#include "tessera/gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/bf16_amx.h"
#include "ops/bf16_dot.h"
#include "ops/quant_gemm.h"
#include "ops/quant_linear.h"
#include "ops/simd.h"
#include "tessera/aligned_buffer.h"
#include "tessera/check.h"
#include "tessera/dtype.h"

namespace tessera::ops {
namespace {

constexpr int64_t kMr = 6;      // tokens per f32 micro-tile
constexpr int64_t kNr = 16;     // output columns per f32 micro-tile (one packed panel)
constexpr int64_t kMrDot = 8;   // tokens per bf16 dot-product tile (pv_tile: 8 x 32 register tiles, 1-7 rows wider)
constexpr int64_t kMrAmx = 32;  // tokens per AMX block (two 16-row A tiles)
// An f32 block is deep and narrow: kKcF32 x kNcF32 f32 = 128 KiB, L2-resident. Each 6 x 16 tile
// call then runs 1024 FMA steps instead of 256 (the call and its C tile loads and stores were the
// overhead; bench/results/kernel_choices.md, "f32 block shape").
constexpr int64_t kKcF32 = 1024;
constexpr int64_t kNcF32 = 32;
constexpr int64_t kNcWide = 128;  // output columns per RunF32Blocks item, at most: 512 KiB of block, in L2
// Above this many tokens a call on prepacked f32 panels goes to RunF32Blocks, where reusing each
// x tile across the item's columns beats streaming the panels 32 columns at a time; at or below,
// RunF32Stream's prefetching items win (bench/results/kernel_choices.md, "Wide items over x tiles").
constexpr int64_t kF32StreamTokens = 128;
constexpr int64_t kNc = 128;    // output columns per packed bf16 pair block, at most
// Depth of a packed bf16 pair block (even: pairs never straddle blocks): kKcDot x kNc bf16 is
// 128 KiB: deeper blocks run faster, and 1024 would need 256 KiB of stack
// (bench/results/kernel_choices.md, "bf16 block depth"). (Models loaded for matmul precision bf16
// skip this packing: their panels were packed at load.)
constexpr int64_t kKcDot = 512;
// Below this many x elements per call (decode), rounding x on the calling thread beats a hand-out.
constexpr int64_t kParallelRoundFloats = 1 << 16;

// Depth of the f32 k blocks: the fewest equal blocks of at most kKcF32, in multiples of 16. Equal
// blocks give each block's tiles as long to prefetch the next one as it takes to read: in = 1152 as
// 1024 + 128 left the 128-deep block's tiles a whole 1024-deep block to prefetch; 576 + 576 is
// faster (bench/results/kernel_choices.md, "Equal f32 k blocks"). Depends on `in` only, so a
// token's result does not depend on n or on the panels' source.
int64_t F32BlockDepth(int64_t in) {
  const int64_t blocks = (in + kKcF32 - 1) / kKcF32;
  return ((in + blocks - 1) / blocks + 15) / 16 * 16;
}

// Widens W[o0 .. o0+nc, k0 .. k0+kc] into panels bp[p][k][16] (columns past nc are zero).
void PackBlock(const SimdKernels& simd, const WeightView& w, int64_t o0, int64_t nc, int64_t k0, int64_t kc, float* bp) {
  if (w.quant != QuantType::kNone) return PackQuantBlock(w, o0, nc, k0, kc, bp);
  const size_t es = DTypeSize(w.dtype);
  for (int64_t p = 0; p * kNr < nc; ++p) {
    const int rows = static_cast<int>(std::min(kNr, nc - p * kNr));
    simd.pack_panel16(w.dtype, static_cast<const char*>(w.data) + ((o0 + p * kNr) * w.in + k0) * es,
                      w.in, rows, kc, bp + p * kc * kNr);
  }
}

// Output columns per bf16 pair block: the widest multiple of kNr up to kNc whose blocks spread evenly over
// the threads (hidden 1152 = 9 blocks of 128 left one of two threads idle for a ninth of the
// down projection; 12 blocks of 96 do not). Multiples of 32 also fill the bf16 micro-tile.
int64_t BlockColumns(int64_t out, int threads) {
  int64_t best = kNc, best_span = INT64_MAX;
  for (int64_t nc = kNc; nc >= kNc / 2; nc -= kNr) {
    const int64_t blocks = (out + nc - 1) / nc;
    const int64_t span = (blocks + threads - 1) / threads * nc;  // columns on the busiest thread
    if (span < best_span) best = nc, best_span = span;
  }
  return best;
}

// Output columns per work item on f32 panels: a whole number of kNcF32 blocks, at most 1/8 of a
// thread's share, choosing the widest whose items spread evenly over the threads. Wide items let a
// tile prefetch the item's next columns and keep each thread's stream long; items that do not
// spread evenly leave one thread an item more than the other, hence the even spread
// (bench/results/kernel_choices.md, "f32 work items").
int64_t F32PanelItemColumns(int64_t out, int threads) {
  const int64_t blocks = (out + kNcF32 - 1) / kNcF32;
  const int64_t most = std::max<int64_t>(1, (blocks + 8 * threads - 1) / (8 * threads));
  int64_t best = 1, best_span = INT64_MAX;
  for (int64_t per = 1; per <= most; ++per) {
    const int64_t items = (blocks + per - 1) / per;
    const int64_t span = (items + threads - 1) / threads * per;  // blocks on the busiest thread
    if (span <= best_span) best = per, best_span = span;
  }
  return best * kNcF32;
}

// Output columns per RunF32Blocks item: a multiple of kNcF32 up to kNcWide, among those giving
// every thread two items or more (else kNcF32), the one whose items spread most evenly over the
// threads, the widest on a tie (fewer passes over x).
int64_t BlocksItemColumns(int64_t out, int threads) {
  int64_t best = kNcF32, best_span = INT64_MAX;
  for (int64_t nc = kNcWide; nc >= kNcF32; nc -= kNcF32) {
    const int64_t items = (out + nc - 1) / nc;
    if (items < 2 * threads && nc > kNcF32) continue;
    const int64_t span = (items + threads - 1) / threads * nc;  // columns on the busiest thread
    if (span < best_span) best = nc, best_span = span;
  }
  return best;
}

// One work item: output columns [o0, o0 + nc) of tokens [t_begin, t_end).
struct Item {
  int64_t o0, nc, t_begin, t_end;
};

// Tokens per f32 micro-tile: the wide tile's on AVX-512, else gemm_tile's.
int64_t F32TileRows() {
  static_assert(kWideTileRows >= kMr, "TileRows' rows hold either tile's");
  return GemmTileWide() != nullptr ? kWideTileRows : kMr;
}

// x rounded to bf16 for the f32 tiles (precision bf16 on CPUs without the dot product): x16 rows
// of x already rounded (x16_stride values apart; Gemm rounds them once per call where it has the
// x_pairs scratch), else each tile rounds its rows per k block.
struct RoundedX {
  bool round = false;
  const uint16_t* x16 = nullptr;
  int64_t x16_stride = 0;
};

// The x rows of the tile at token t (mr of them; the rest repeat the first) over k block
// [k0, k0 + kc): as given, or rounded to bf16 values into xr (rx.round).
void TileRows(const SimdKernels& simd, const float* x, int64_t x_stride, const RoundedX& rx, int64_t t, int mr,
              int64_t k0, int64_t kc, float (*xr)[kKcF32], const float** rows) {
  const int64_t tile_rows = F32TileRows();
  for (int r = 0; r < tile_rows; ++r) {
    const float* row = x + (t + (r < mr ? r : 0)) * x_stride + k0;
    if (rx.round && r < mr) {
      if (rx.x16) {
        simd.widen_bf16(rx.x16 + (t + r) * rx.x16_stride + k0, kc, xr[r]);
      } else {
        RoundBf16(row, kc, xr[r]);
      }
    }
    rows[r] = rx.round ? xr[r < mr ? r : 0] : row;
  }
}

// f32 micro-tiles on the weight's prepacked panels (w.panels), for calls of few tokens
// (kF32StreamTokens): the item's columns go kNcF32 at a time, each block's tiles prefetching the
// next block, so the panels stream from memory at the rate the tiles take them. The blocks are
// F32BlockDepth(in) deep as in RunF32Blocks, so a token's result does not depend on n.
void RunF32Stream(const SimdKernels& simd, const WeightView& w, const float* x, int64_t x_stride, float* y,
                  int64_t y_stride, const Item& it, const RoundedX& rx) {
  alignas(64) float xr[kWideTileRows][kKcF32];  // the tile's x rows rounded to bf16 (rx.round only)
  // On AVX-512 a block's two panels go to the 8 x 32 tile at once: 16 zmm accumulators where
  // gemm_tile's 6 x 16 keeps 12 ymm ones, which leave half of a CPU's 512-bit FMA rate unused where
  // it has two such units (bench/results/kernel_choices.md, "The wide f32 tile in Linear"). Each
  // element is the same FMA chain either way: the tile shape changes no bit.
  const GemmTileWideFn wide = GemmTileWide();
  const int64_t tile_rows = F32TileRows();
  const int64_t tiles = std::max<int64_t>(1, (it.t_end - it.t_begin + tile_rows - 1) / tile_rows);
  // 2 tokens or more: each tile call prefetches its share of its panel in the next block (a panel's
  // k step is one 64-byte line), so that block streams in while this one is computed instead of
  // stalling the block's first tile. Not for one token: memory-bound, the hardware prefetcher keeps
  // up and the prefetches only cost (bench/results/kernel_choices.md, "f32 next-block prefetch").
  const bool prefetch = it.t_end - it.t_begin > 1;
  const int64_t depth = F32BlockDepth(w.in), stride = w.in * kNr;  // (panels `stride` apart)
  for (int64_t c0 = it.o0; c0 < it.o0 + it.nc; c0 += kNcF32) {
    const int64_t nc = std::min(kNcF32, it.o0 + it.nc - c0);
    for (int64_t k0 = 0; k0 < w.in; k0 += depth) {
      const int64_t kc = std::min(depth, w.in - k0);
      const float* panels = w.panels + (c0 / kNr * w.in + k0) * kNr;  // these columns' first panel at this block
      // The next block: the next k block of these columns, else the first of the item's next ones
      // (its first panel, next_kc deep, next_panels of them).
      const float* next = nullptr;
      int64_t next_kc = 0, next_panels = 0;
      if (prefetch && k0 + kc < w.in) {
        next = panels + kc * kNr, next_kc = std::min(depth, w.in - k0 - kc), next_panels = (nc + kNr - 1) / kNr;
      } else if (prefetch && c0 + kNcF32 < it.o0 + it.nc) {
        next = w.panels + (c0 + kNcF32) / kNr * w.in * kNr, next_kc = std::min(depth, w.in);
        next_panels = (std::min(kNcF32, it.o0 + it.nc - c0 - kNcF32) + kNr - 1) / kNr;
      }
      const int64_t share = (next_kc + tiles - 1) / tiles;  // lines of a panel's next block per tile call
      for (int64_t t = it.t_begin; t < it.t_end; t += tile_rows) {
        const int mr = static_cast<int>(std::min(tile_rows, it.t_end - t));
        const float* rows[kWideTileRows];
        TileRows(simd, x, x_stride, rx, t, mr, k0, kc, xr, rows);
        const int64_t first = (t - it.t_begin) / tile_rows * share;  // this tile's share of the next block
        if (wide != nullptr) {
          TilePrefetch pf;
          if (next != nullptr && first < next_kc)
            pf = {next + first * kNr, stride, static_cast<int>(next_panels), std::min(share, next_kc - first)};
          wide(rows, panels, stride, kc, y + t * y_stride + c0, y_stride, mr, static_cast<int>(nc), k0 > 0, pf);
          continue;
        }
        for (int64_t j = 0; j < nc; j += kNr) {
          const bool pf = next != nullptr && j / kNr < next_panels && first < next_kc;
          simd.gemm_tile(rows, panels + (j / kNr) * stride, kc, y + t * y_stride + c0 + j, y_stride, mr,
                         static_cast<int>(std::min(kNr, nc - j)), k0 > 0,
                         pf ? next + (j / kNr) * stride + first * kNr : nullptr, pf ? std::min(share, next_kc - first) : 0);
        }
      }
    }
  }
}

// f32 micro-tiles over all the item's columns (up to kNcWide) per k block: the prepacked panels,
// or the weight packed here (widened or dequantized) once per block; then each tile of x rows runs
// against all those columns while its rows are in L1. Items kNcF32 wide had swept every x row once
// per 32 columns, and a many-token call's rows stream from L3 (the towers' thousands of patches, a
// decoder's prefill on bf16 weights at precision f32); now once per item, and the item's columns
// stay in L2 (bench/results/kernel_choices.md, "Wide items over x tiles"). Each element is the same
// FMA chain as in RunF32Stream: the order of tiles and columns changes no bit.
void RunF32Blocks(const SimdKernels& simd, const WeightView& w, const float* x, int64_t x_stride, float* y,
                  int64_t y_stride, const Item& it, const RoundedX& rx) {
  // The packed block, [nc / 16][kc][16]: allocated on a thread's first packing call, then kept (a
  // tower's encode or a prefill would otherwise allocate it per item; 512 KiB is too much stack).
  thread_local AlignedBuffer packed;
  alignas(64) float xr[kWideTileRows][kKcF32];  // the tile's x rows rounded to bf16 (rx.round only)
  const GemmTileWideFn wide = GemmTileWide();
  const int64_t tile_rows = F32TileRows(), cols = wide != nullptr ? kNcF32 : kNr;  // per tile call
  const int64_t depth = w.quant != QuantType::kNone ? QuantBlockDepth(w.quant, w.in, kKcF32) : F32BlockDepth(w.in);
  if (w.panels == nullptr && packed.size() == 0) packed = AlignedBuffer(kNcWide * kKcF32 * sizeof(float));
  for (int64_t k0 = 0; k0 < w.in; k0 += depth) {
    const int64_t kc = std::min(depth, w.in - k0);
    const float* panels = packed.as<float>();  // the item's first panel at this block,
    int64_t stride = kc * kNr;                  // the next ones `stride` apart
    if (w.panels != nullptr) {
      panels = w.panels + (it.o0 / kNr * w.in + k0) * kNr, stride = w.in * kNr;
    } else {
      for (int64_t j = 0; j < it.nc; j += kNcF32)  // (PackQuantBlock takes at most 64 columns)
        PackBlock(simd, w, it.o0 + j, std::min(kNcF32, it.nc - j), k0, kc, packed.as<float>() + j / kNr * stride);
    }
    for (int64_t t = it.t_begin; t < it.t_end; t += tile_rows) {
      const int mr = static_cast<int>(std::min(tile_rows, it.t_end - t));
      const float* rows[kWideTileRows];
      TileRows(simd, x, x_stride, rx, t, mr, k0, kc, xr, rows);
      for (int64_t j = 0; j < it.nc; j += cols) {
        const int nr = static_cast<int>(std::min(cols, it.nc - j));
        float* c = y + t * y_stride + it.o0 + j;
        if (wide != nullptr) {
          wide(rows, panels + j / kNr * stride, stride, kc, c, y_stride, mr, nr, k0 > 0, {});
        } else {
          simd.gemm_tile(rows, panels + j / kNr * stride, kc, c, y_stride, mr, nr, k0 > 0, nullptr, 0);
        }
      }
    }
  }
}

// Words per row of the rounded-x scratch: in / 2 pairs, padded to 64 bytes, or the int8 GEMM's
// two-byte activations (ops/quant_gemm.h) where those are wider: one scratch serves both.
int64_t PairsStride(int64_t in) { return std::max(((in + 1) / 2 + 15) / 16 * 16, QuantGemmRowBytes(in) / 4); }

#include "ops/pair_blocks.inc"

// bf16 dot products on pair panels, pv_tile over each 8-token tile (it adds to y: zeroed first).
// The panels are the weight's prepacked ones (w.pairs, with xr) or packed here once per 512-deep
// block; x rows come as pairs from xr (rounded once per call) or are rounded here once per block.
void RunBf16Dot(const Bf16DotKernels& dot, const WeightView& w, const float* x, int64_t x_stride, const uint32_t* xr,
                float* y, int64_t y_stride, const Item& it) {
  alignas(64) uint32_t bp[kKcDot / 2 * kNc];    // per-call pair panels, [nc / 16][kc / 2][16]
  alignas(64) uint32_t xp[kMrDot][kKcDot / 2];  // the tile's x rows as bf16 pairs (no xr)
  const bool prepacked = w.pairs != nullptr && xr != nullptr;
  const int64_t pairs = (w.in + 1) / 2, block = prepacked ? PairBlockPairs(pairs) : kKcDot / 2;
  for (int64_t p0 = 0; p0 < pairs; p0 += block) {
    const int64_t bpairs = std::min(block, pairs - p0), k0 = 2 * p0, kc = std::min(2 * block, w.in - k0);
    const uint32_t* panels = bp;  // the item's first panel at this block; the next ones `stride` apart
    int64_t stride = bpairs * 16;
    if (prepacked) {
      panels = w.pairs + it.o0 / 16 * pairs * 16 + p0 * 16, stride = pairs * 16;
    } else {
      if (w.quant != QuantType::kNone) {
        PackQuantPairs(dot, w, it.o0, it.nc, k0, kc, bp);
      } else {
        dot.pack_weight_pairs16(static_cast<const uint16_t*>(w.data) + it.o0 * w.in + k0, w.in, it.nc, kc, bp);
      }
    }
    for (int64_t t = it.t_begin; t < it.t_end; t += kMrDot) {
      const int mr = static_cast<int>(std::min(kMrDot, it.t_end - t));
      const uint32_t* rows[kMrDot];
      for (int r = 0; r < kMrDot; ++r) {
        const int64_t row = t + (r < mr ? r : 0);
        if (xr) {
          rows[r] = xr + row * PairsStride(w.in) + p0;
        } else {
          if (r < mr) dot.pairs_from_f32(x + row * x_stride + k0, kc, xp[r]);
          rows[r] = xp[r < mr ? r : 0];
        }
      }
      if (p0 == 0)
        for (int r = 0; r < mr; ++r) std::memset(y + (t + r) * y_stride + it.o0, 0, it.nc * sizeof(float));
      dot.pv_tile(rows, panels, bpairs, stride, y + t * y_stride + it.o0, y_stride, mr, static_cast<int>(it.nc), nullptr);
    }
  }
}

// AMX tiles on the prepacked panels and x pairs (ops/bf16_amx.h): the item's columns start a panel.
void RunAmx(Bf16AmxGemmFn amx, const WeightView& w, const uint32_t* xr, float* y, int64_t y_stride, const Item& it) {
  const int64_t pairs = (w.in + 1) / 2, stride = PairsStride(w.in);
  amx(xr + it.t_begin * stride, stride, it.t_end - it.t_begin, w.pairs + it.o0 / 16 * pairs * 16, pairs, it.nc,
      y + it.t_begin * y_stride + it.o0, y_stride, false);
}

// AMX tiles on weights without pair panels: each kKcDot-deep block of the item's columns packed
// (bf16 weights) or dequantized (quantized ones) into bf16 pair panels (128 KiB, L2-resident while
// every token of the item passes over them), the blocks summed into y by the kernel's accumulate
// (f32 C between blocks: the bits of one call). kKcDot is a multiple of 32, so only the last block
// can end in a partial step or a half pair (zero-padded by the packers).
void RunAmxPacked(const Bf16DotKernels& dot, Bf16AmxGemmFn amx, const WeightView& w, const uint32_t* xr, float* y,
                  int64_t y_stride, const Item& it) {
  alignas(64) uint32_t bp[kKcDot / 2 * kNc];  // the block's pair panels, [nc / 16][ceil(kc / 2)][16]
  const int64_t stride = PairsStride(w.in);
  for (int64_t k0 = 0; k0 < w.in; k0 += kKcDot) {
    const int64_t kc = std::min(kKcDot, w.in - k0);
    if (w.quant != QuantType::kNone) {
      PackQuantPairs(dot, w, it.o0, it.nc, k0, kc, bp);
    } else {
      dot.pack_weight_pairs16(static_cast<const uint16_t*>(w.data) + it.o0 * w.in + k0, w.in, it.nc, kc, bp);
    }
    amx(xr + it.t_begin * stride + k0 / 2, stride, it.t_end - it.t_begin, bp, (kc + 1) / 2, it.nc,
        y + it.t_begin * y_stride + it.o0, y_stride, k0 > 0);
  }
}

}  // namespace

int64_t PairPanelWords(int64_t out, int64_t in) { return (out + 15) / 16 * ((in + 1) / 2) * 16; }

bool PackPairPanels(const WeightView& w, uint32_t* dst) {
  const Bf16DotKernels* dot = Bf16Dot();
  if (dot == nullptr || w.dtype != DType::kBF16) return false;
  dot->pack_weight_pairs16(static_cast<const uint16_t*>(w.data), w.in, w.out, w.in, dst);
  return true;
}

int64_t F32PanelFloats(int64_t out, int64_t in) { return (out + 15) / 16 * in * 16; }

void PackF32Panels(const WeightView& w, float* dst) {
  const SimdKernels& simd = Simd();
  const char* src = static_cast<const char*>(w.data);
  const size_t es = DTypeSize(w.dtype);
  for (int64_t p = 0; p * kNr < w.out; ++p)
    simd.pack_panel16(w.dtype, src + p * kNr * w.in * es, w.in,
                      static_cast<int>(std::min(kNr, w.out - p * kNr)), w.in, dst + p * w.in * kNr);
}

void F32PanelRowToF32(const float* panels, int64_t in, int64_t r, float* dst) {
  const float* lane = panels + (r / kNr) * in * kNr + r % kNr;  // element i of row r at lane[i * 16]
  for (int64_t i = 0; i < in; ++i) dst[i] = lane[i * kNr];
}

void PairPanelRowToF32(const uint32_t* panels, int64_t in, int64_t r, float* dst) {
  const int64_t pairs = (in + 1) / 2;
  const uint32_t* lane = panels + (r / 16) * pairs * 16 + r % 16;  // word p of row r at lane[p * 16]
  for (int64_t i = 0; i < in; ++i) dst[i] = Bf16ToF32(static_cast<uint16_t>(lane[(i / 2) * 16] >> (16 * (i % 2))));
}

// Each call dequantizes every weight once, a cost that does not shrink with n: below this many
// tokens the int8 GEMM was as fast or faster on some types (bench/results/amx_quant.md).
int64_t QuantAmxMinTokens() { return 96; }

int64_t GemmScratchWords(int64_t n, int64_t in) { return n * PairsStride(in); }

void Gemm(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
          ThreadPool* pool, MatmulPrecision precision, uint32_t* x_pairs) {
  const bool bf16 = precision == MatmulPrecision::kBf16;
  const bool quant = w.quant != QuantType::kNone;
  TESSERA_CHECK(!bf16 || quant || w.dtype == DType::kBF16, "Gemm: precision bf16 needs bf16 or quantized weights");
  TESSERA_CHECK(!quant || w.in % QuantBlockElems(w.quant) == 0, "Gemm: quantized weight rows must be whole blocks");
  const SimdKernels& simd = Simd();
  // Quantized weights dequantize into f32 panels, or at precision bf16 on CPUs with the dot product
  // into bf16 pair panels (1.2-1.9x the f32 panels with x rounded per tile, before the f32 tiles
  // too took x rounded once: bench/results/quant_kernels.md).
  const Bf16DotKernels* dot = bf16 ? Bf16Dot() : nullptr;
  // Precision bf16 with the x pairs scratch runs on AMX tiles where the CPU has them: prepacked
  // panels for every token count (decode included), so a token's bits do not depend on n; bf16
  // weights read as stored (--no-repack, the vision towers) and quantized ones (x and the
  // dequantized weights rounded to bf16: docs/quantization.md) on blocks packed per call. Linear
  // decides which calls come here (the row-dot below kGemmMinTokensBf16, the int8 GEMM for
  // quantized weights below QuantAmxMinTokens). Precision f32 never does: its weights stay exact.
  const Bf16AmxGemmFn amx = dot && x_pairs ? Bf16Amx() : nullptr;
  const int threads = pool ? pool->num_threads() : 1;
  const bool stream = dot == nullptr && w.panels != nullptr && n <= kF32StreamTokens;  // RunF32Stream, else RunF32Blocks
  const int64_t block_cols = dot      ? BlockColumns(w.out, threads)
                             : stream ? F32PanelItemColumns(w.out, threads)
                                      : BlocksItemColumns(w.out, threads);
  const int64_t col_blocks = (w.out + block_cols - 1) / block_cols;
  // Enough items to keep every thread busy; token ranges are whole micro-tiles.
  const int64_t mr = amx ? kMrAmx : dot ? kMrDot : F32TileRows();
  const int64_t tiles = (n + mr - 1) / mr;
  const int64_t row_blocks = std::min<int64_t>(tiles, std::max<int64_t>(1, (2 * threads + col_blocks - 1) / col_blocks));
  const int64_t tiles_per_block = (tiles + row_blocks - 1) / row_blocks;
  // x rounded once, a token row per work item: to pairs for the dot product, else (precision bf16
  // on f32 tiles) to bf16 values that each tile widens, where rounding per tile and block of
  // columns had cost about as much as the tiles (bench/results/kernel_choices.md, "The wide f32 tile
  // in Linear").
  RoundedX rx;
  rx.round = bf16 && !dot;
  if (x_pairs && bf16) {
    const int64_t stride = PairsStride(w.in);
    auto round_row = [&](int64_t t, int) {
      if (dot) return dot->pairs_from_f32(x + t * x_stride, w.in, x_pairs + t * stride);
      simd.round_bf16(x + t * x_stride, w.in, reinterpret_cast<uint16_t*>(x_pairs + t * stride));
    };
    if (pool && n * w.in >= kParallelRoundFloats) {
      pool->ParallelFor(n, round_row);
    } else {
      for (int64_t t = 0; t < n; ++t) round_row(t, 0);
    }
    if (!dot) rx.x16 = reinterpret_cast<const uint16_t*>(x_pairs), rx.x16_stride = 2 * stride;
  }
  if (!dot) x_pairs = nullptr;
  auto run = [&](int64_t item, int) {
    const int64_t cb = item % col_blocks, rb = item / col_blocks;
    const int64_t o0 = cb * block_cols, t_begin = rb * tiles_per_block * mr;
    const Item it{o0, std::min(block_cols, w.out - o0), t_begin, std::min(n, t_begin + tiles_per_block * mr)};
    if (amx && w.pairs == nullptr) return RunAmxPacked(*dot, amx, w, x_pairs, y, y_stride, it);
    if (amx) return RunAmx(amx, w, x_pairs, y, y_stride, it);
    if (dot) return RunBf16Dot(*dot, w, x, x_stride, x_pairs, y, y_stride, it);
    if (stream) return RunF32Stream(simd, w, x, x_stride, y, y_stride, it, rx);
    RunF32Blocks(simd, w, x, x_stride, y, y_stride, it, rx);
  };
  const int64_t items = col_blocks * ((tiles + tiles_per_block - 1) / tiles_per_block);  // (no empty token block)
  if (pool) {
    pool->ParallelFor(items, run);
  } else {
    for (int64_t i = 0; i < items; ++i) run(i, 0);
  }
}

}  // namespace tessera::ops
