// AMX implementation of ops/bf16_amx.h, compiled with -mamx-tile -mamx-bf16 and called only where
// Bf16Amx() found the CPU's AMX and the kernel's permission to use it.
#include "ops/bf16_amx.h"

#include <immintrin.h>

#include <cstring>

#include "ops/amx_tile_config.h"

namespace tessera::ops {
namespace {

// Tiles: 0, 1: C of token rows 0-15 (panels 0, 1); 2, 3: C of rows 16-31; 4, 5: A (rows 0-15,
// 16-31); 6, 7: B (panels 0, 1). A 32 x 32 block: 4 products per 2 A and 2 B tile loads.
// r1 = 0 leaves tiles 2, 3 and 5 unconfigured (a block of up to 16 tokens).
void Configure(int r0, int r1) {
  AmxTileConfig cfg;
  const int rows[8] = {r0, r0, r1, r1, r0, r1, 16, 16};
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = static_cast<uint8_t>(rows[t]);
    cfg.colsb[t] = rows[t] > 0 ? 64 : 0;
  }
  _tile_loadconfig(&cfg);
}

// Sources of one 16-pair step: A rows (a_stride bytes apart), B panels (1 KiB each, 64-byte rows).
struct Step {
  const uint32_t *a, *b0, *b1;
  int64_t a_stride;
};

template <bool kRows2, bool kCols2>
inline void Accumulate(const Step& s) {
  _tile_loadd(4, s.a, s.a_stride);
  if (kRows2) _tile_loadd(5, s.a + 16 * (s.a_stride / 4), s.a_stride);
  _tile_loadd(6, s.b0, 64);
  if (kCols2) _tile_loadd(7, s.b1, 64);
  _tile_dpbf16ps(0, 4, 6);
  if (kCols2) _tile_dpbf16ps(1, 4, 7);
  if (kRows2) _tile_dpbf16ps(2, 5, 6);
  if (kRows2 && kCols2) _tile_dpbf16ps(3, 5, 7);
}

// k blocks (PairBlockPairs): the item's panels of a block (up to 128 columns x 2048 pairs, 1 MiB)
// stay in L2 while every 32-row block of tokens passes over them. C goes to y and back between
// blocks as f32, which is exact: the blocking does not change a bit.
#include "ops/pair_blocks.inc"

// Where one 32 x 32 block's C tiles come from and go: y itself (c_stride its row stride in
// floats) when the block is whole, else the [32][32] scratch, copied from and to y's live part.
struct BlockC {
  float* c;
  int64_t c_stride;
};

// One block of up to 32 rows x 32 columns over `steps` 16-pair steps read in place, then the tail
// step (tail_a: its zero-padded copy, or null): C from c (first: zero), back into c.
template <bool kRows2, bool kCols2>
void Block(const uint32_t* x, int64_t x_stride, const uint32_t* b0, int64_t pairs, int64_t steps,
           const uint32_t* tail_a, const uint32_t* tail_b, BlockC c, bool first) {
  const int64_t cs = c.c_stride * 4;
  float* c2 = c.c + 16 * c.c_stride;
  if (first) {
    _tile_zero(0);
    if (kCols2) _tile_zero(1);
    if (kRows2) _tile_zero(2);
    if (kRows2 && kCols2) _tile_zero(3);
  } else {
    _tile_loadd(0, c.c, cs);
    if (kCols2) _tile_loadd(1, c.c + 16, cs);
    if (kRows2) _tile_loadd(2, c2, cs);
    if (kRows2 && kCols2) _tile_loadd(3, c2 + 16, cs);
  }
  const uint32_t* b1 = b0 + pairs * 16;
  for (int64_t s = 0; s < steps; ++s)
    Accumulate<kRows2, kCols2>(Step{x + s * 16, b0 + s * 256, b1 + s * 256, x_stride * 4});
  if (tail_a) Accumulate<kRows2, kCols2>(Step{tail_a, tail_b, tail_b + 256, 64});
  _tile_stored(0, c.c, cs);
  if (kCols2) _tile_stored(1, c.c + 16, cs);
  if (kRows2) _tile_stored(2, c2, cs);
  if (kRows2 && kCols2) _tile_stored(3, c2 + 16, cs);
}

// The shape's instance of Block.
void RunBlock(bool rows2, bool cols2, const uint32_t* x, int64_t x_stride, const uint32_t* b0, int64_t pairs,
              int64_t steps, const uint32_t* tail_a, const uint32_t* tail_b, BlockC c, bool first) {
  if (rows2 && cols2) return Block<true, true>(x, x_stride, b0, pairs, steps, tail_a, tail_b, c, first);
  if (rows2) return Block<true, false>(x, x_stride, b0, pairs, steps, tail_a, tail_b, c, first);
  if (cols2) return Block<false, true>(x, x_stride, b0, pairs, steps, tail_a, tail_b, c, first);
  Block<false, false>(x, x_stride, b0, pairs, steps, tail_a, tail_b, c, first);
}

}  // namespace

void Bf16AmxGemm(const uint32_t* x, int64_t x_stride, int64_t rows, const uint32_t* panels, int64_t pairs,
                 int64_t cols, float* y, int64_t y_stride, bool accumulate) {
  const int64_t steps = pairs / 16, tail = pairs % 16;
  alignas(64) uint32_t tail_a[32 * 16];      // the rows' last pairs, zero-padded to a step
  alignas(64) uint32_t tail_b[2 * 16 * 16];  // the two panels' last pair rows, zero-padded
  alignas(64) float c[32 * 32];              // C of a partial block
  int configured = -1;                       // r0 * 32 + r1 of the loaded configuration
  const int64_t block_pairs = PairBlockPairs(pairs);
  for (int64_t p0 = 0; p0 < pairs; p0 += block_pairs) {
    const bool first = p0 == 0 && !accumulate, last = p0 + block_pairs >= pairs;
    const int64_t block_steps = (last ? steps * 16 - p0 : block_pairs) / 16;
    for (int64_t m0 = 0; m0 < rows; m0 += 32) {
      const int mr = static_cast<int>(rows - m0 < 32 ? rows - m0 : 32);
      const int r0 = mr < 16 ? mr : 16, r1 = mr - r0;
      if (r0 * 32 + r1 != configured) Configure(r0, r1), configured = r0 * 32 + r1;
      const uint32_t* xm = x + m0 * x_stride;
      const uint32_t* ta = last && tail ? tail_a : nullptr;
      if (ta) {
        std::memset(tail_a, 0, sizeof tail_a);
        for (int r = 0; r < mr; ++r) std::memcpy(tail_a + r * 16, xm + r * x_stride + steps * 16, tail * 4);
      }
      for (int64_t j0 = 0; j0 < cols; j0 += 32) {
        const bool two = cols - j0 > 16;
        const int64_t nc = cols - j0 < 32 ? cols - j0 : 32;
        const uint32_t* b0 = panels + (j0 / 16) * pairs * 16;
        if (ta) {
          std::memset(tail_b, 0, sizeof tail_b);
          for (int q = 0; q < (two ? 2 : 1); ++q)
            std::memcpy(tail_b + q * 256, b0 + q * pairs * 16 + steps * 256, tail * 64);
        }
        float* yb = y + m0 * y_stride + j0;
        const bool whole = mr == 32 && nc == 32;
        if (!whole && !first)
          for (int r = 0; r < mr; ++r) std::memcpy(c + r * 32, yb + r * y_stride, nc * sizeof(float));
        RunBlock(r1 > 0, two, xm + p0, x_stride, b0 + p0 * 16, pairs, block_steps, ta, tail_b,
                 whole ? BlockC{yb, y_stride} : BlockC{c, 32}, first);
        if (!whole)
          for (int r = 0; r < mr; ++r) std::memcpy(yb + r * y_stride, c + r * 32, nc * sizeof(float));
      }
    }
  }
  _tile_release();
}

}  // namespace tessera::ops
