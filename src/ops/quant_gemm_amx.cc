// The int8 GEMM's micro-tile (ops/quant_gemm.h) on Intel AMX tiles: TDPBSUD multiplies 16 token rows
// of signed activation bytes by a panel's unsigned codes, whose [k / 4][16][4] layout is already a
// B tile, into 16 x 16 exact int32 sums per instruction. One sub-block per step (K = 16 or 32
// bytes), q_hi and q_lo into two C tiles, then the same f32 steps as the VNNI tile in the same
// order: the integers are exact either way, so the results are the same bits.
// Compiled with AMX-TILE/INT8 and AVX-512 F/BW/VL; called only where QuantGemmAmxActive().
#include <immintrin.h>

#include <algorithm>

#include "ops/amx_tile_config.h"
#include "ops/quant_gemm.h"

namespace tessera::ops {
namespace {

// Tiles: 0, 1 and 5, 6: C of q_hi, q_lo (16 tokens x 16 rows int32) for even and odd sub-blocks;
// 2, 3: A of q_hi, q_lo (16 tokens x sub bytes); 4 and 7: B, the panel's sub / 4 code rows of 64
// bytes (even, odd). Alternating C and B lets one sub-block's products start before the last
// sub-block's are stored.
void Configure(int64_t sub) {
  AmxTileConfig cfg;
  for (int t : {0, 1, 5, 6}) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  for (int t : {2, 3}) cfg.rows[t] = 16, cfg.colsb[t] = static_cast<uint16_t>(sub);
  for (int t : {4, 7}) cfg.rows[t] = static_cast<uint8_t>(sub / 4), cfg.colsb[t] = 64;
  _tile_loadconfig(&cfg);
}

// Sub-blocks per batch: a batch's tile products and stores are issued before the f32 steps of the
// batch before it read theirs back, so the tile unit's latency and the store-to-load round trip
// through memory overlap the vector work instead of stalling it every sub-block.
constexpr int64_t kBatch = 8;

// Integer sums of sub-blocks g0 .. g0 + count into c[count][2][16][16] (q_hi, q_lo).
inline void IssueBatch(const int8_t* hi, const int8_t* lo, int64_t stride, const uint8_t* codes, int64_t sub,
                       int64_t g0, int64_t count, int32_t* c) {
  for (int64_t i = 0; i < count; i += 2) {
    const int64_t g = g0 + i;
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(2, hi + g * sub, stride);
    _tile_loadd(3, lo + g * sub, stride);
    _tile_loadd(4, codes + g * sub * 16, 64);
    _tile_dpbsud(0, 2, 4);
    _tile_dpbsud(1, 3, 4);
    if (i + 1 < count) {
      _tile_zero(5);
      _tile_zero(6);
      _tile_loadd(7, codes + (g + 1) * sub * 16, 64);
    }
    _tile_stored(0, c + i * 512, 64);
    _tile_stored(1, c + i * 512 + 256, 64);
    if (i + 1 < count) {
      _tile_loadd(2, hi + (g + 1) * sub, stride);
      _tile_loadd(3, lo + (g + 1) * sub, stride);
      _tile_dpbsud(5, 2, 7);
      _tile_dpbsud(6, 3, 7);
      _tile_stored(5, c + (i + 1) * 512, 64);
      _tile_stored(6, c + (i + 1) * 512 + 256, 64);
    }
  }
}

}  // namespace

void QuantGemmTileAmx(const QuantAmxRows& x, const uint8_t* codes, const float* a, const float* b, int64_t kc,
                      int64_t sub, float* y, int64_t y_stride, int nr, bool accumulate, bool centered) {
  constexpr int kT = kQuantAmxTokens;
  Configure(sub);
  const __mmask16 m = static_cast<__mmask16>(nr >= 16 ? 0xffff : (1u << nr) - 1);
  __m512 acc[kT];
#pragma GCC unroll 16
  for (int r = 0; r < kT; ++r) acc[r] = accumulate ? _mm512_maskz_loadu_ps(m, y + r * y_stride) : _mm512_setzero_ps();
  const int8_t* hi = reinterpret_cast<const int8_t*>(x.row0) + x.k0;
  const int8_t* lo = hi + x.in;
  const float* xd = reinterpret_cast<const float*>(x.row0 + 2 * x.in) + x.k0 / 32;  // token 0's; rows x.stride bytes apart
  const float* xs = reinterpret_cast<const float*>(x.row0 + 2 * x.in) + x.in / 32 + x.k0 / sub;
  const int64_t fs = x.stride / 4;  // the row stride in floats (a multiple of 64 bytes)
  alignas(64) int32_t c[2][kBatch * 512];
  const int64_t groups = kc / sub;
  IssueBatch(hi, lo, x.stride, codes, sub, 0, std::min(kBatch, groups), c[0]);
  for (int64_t g0 = 0, bi = 0; g0 < groups; g0 += kBatch, bi ^= 1) {
    if (g0 + kBatch < groups)
      IssueBatch(hi, lo, x.stride, codes, sub, g0 + kBatch, std::min(kBatch, groups - g0 - kBatch), c[bi ^ 1]);
    for (int64_t i = 0; i < std::min(kBatch, groups - g0); ++i) {
      const int64_t g = g0 + i, gd = g * sub / 32;
      const int32_t* ci = c[bi] + i * 512;
      const __m512 av = _mm512_load_ps(a + g * 16);
      const __m512 bv = centered ? _mm512_setzero_ps() : _mm512_load_ps(b + g * 16);  // (b unwritten there)
      // Unrolled so that the 16 accumulators stay in registers.
#pragma GCC unroll 16
      for (int r = 0; r < kT; ++r) {
        // 256 sum(code q_hi) + sum(code q_lo), as the VNNI tile forms it (exact: below 2^31).
        const __m512i s = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(ci + 16 * r), 8),
                                           _mm512_load_si512(ci + 256 + 16 * r));
        const __m512 d = _mm512_set1_ps(xd[r * fs + gd]), o = _mm512_set1_ps(xs[r * fs + g]);
        if (centered) {  // the offsets folded into xs (quant_gemm.h)
          acc[r] = _mm512_fmadd_ps(av, _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, o), acc[r]);
        } else {
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(av, d), acc[r]);
          acc[r] = _mm512_fmadd_ps(bv, o, acc[r]);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kT; ++r) _mm512_mask_storeu_ps(y + r * y_stride, m, acc[r]);
}

void QuantAmxRelease() { _tile_release(); }

}  // namespace tessera::ops
