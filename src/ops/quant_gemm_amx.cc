// The int8 GEMM's micro-tile (ops/quant_gemm.h) on Intel AMX tiles: TDPBSUD multiplies 16 token rows
// of signed activation bytes by a panel's unsigned codes, whose [k / 4][16][4] layout is already a
// B tile, into 16 x 16 exact int32 sums per instruction. One sub-block per step (K = 16 or 32
// bytes), q_hi and q_lo into two C tiles, then the same f32 steps as the VNNI tile in the same
// order: the integers are exact either way, so the results are the same bits.
// Compiled with AMX-TILE/INT8 and AVX-512 F/BW/VL; called only where QuantGemmAmxActive().
#include <immintrin.h>

#include "ops/quant_gemm.h"

namespace tessera::ops {
namespace {

// The LDTILECFG operand (palette 1): per tile, its rows and bytes per row.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles: 0, 1: C of q_hi, q_lo (16 tokens x 16 rows int32); 2, 3: A of q_hi, q_lo (16 tokens x sub
// bytes); 4: B, the panel's sub / 4 code rows of 64 bytes.
void Configure(int64_t sub) {
  TileConfig cfg;
  cfg.rows[0] = cfg.rows[1] = cfg.rows[2] = cfg.rows[3] = 16;
  cfg.colsb[0] = cfg.colsb[1] = 64;
  cfg.colsb[2] = cfg.colsb[3] = static_cast<uint16_t>(sub);
  cfg.rows[4] = static_cast<uint8_t>(sub / 4), cfg.colsb[4] = 64;
  _tile_loadconfig(&cfg);
}

}  // namespace

void QuantGemmTileAmx(const QuantAmxRows& x, const uint8_t* codes, const float* a, const float* b, int64_t kc,
                      int64_t sub, float* y, int64_t y_stride, int nr, bool accumulate) {
  constexpr int kT = kQuantAmxTokens;
  Configure(sub);
  const __mmask16 m = static_cast<__mmask16>(nr >= 16 ? 0xffff : (1u << nr) - 1);
  __m512 acc[kT];
  for (int r = 0; r < kT; ++r) acc[r] = accumulate ? _mm512_maskz_loadu_ps(m, y + r * y_stride) : _mm512_setzero_ps();
  const int8_t* hi = reinterpret_cast<const int8_t*>(x.row0) + x.k0;
  const int8_t* lo = hi + x.in;
  const float* xd = reinterpret_cast<const float*>(x.row0 + 2 * x.in) + x.k0 / 32;  // token 0's; rows x.stride bytes apart
  const float* xs = reinterpret_cast<const float*>(x.row0 + 2 * x.in) + x.in / 32 + x.k0 / sub;
  const int64_t fs = x.stride / 4;  // the row stride in floats (a multiple of 64 bytes)
  alignas(64) int32_t c[2][kT][16];
  for (int64_t g = 0; g < kc / sub; ++g) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(2, hi + g * sub, x.stride);
    _tile_loadd(3, lo + g * sub, x.stride);
    _tile_loadd(4, codes + g * sub * 16, 64);
    _tile_dpbsud(0, 2, 4);
    _tile_dpbsud(1, 3, 4);
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    const __m512 av = _mm512_load_ps(a + g * 16), bv = _mm512_load_ps(b + g * 16);
    const int64_t gd = g * sub / 32;
    for (int r = 0; r < kT; ++r) {
      // 256 sum(code q_hi) + sum(code q_lo), as the VNNI tile forms it (exact: below 2^31).
      const __m512i s = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c[0][r]), 8), _mm512_load_si512(c[1][r]));
      const __m512 d = _mm512_set1_ps(xd[r * fs + gd]), o = _mm512_set1_ps(xs[r * fs + g]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(av, d), acc[r]);
      acc[r] = _mm512_fmadd_ps(bv, o, acc[r]);
    }
  }
  for (int r = 0; r < kT; ++r) _mm512_mask_storeu_ps(y + r * y_stride, m, acc[r]);
}

void QuantAmxRelease() { _tile_release(); }

}  // namespace tessera::ops
