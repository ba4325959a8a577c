// The int8 GEMM's micro-tile (ops/quant_gemm.h) on AVX-512 VNNI: vpdpbusd adds four unsigned code x
// signed activation byte products into each of 16 lanes (one lane per weight row), so a k step of 4
// is one instruction per token, panel and activation byte (q_hi, q_lo) with the token's 4 bytes
// broadcast. Compiled with AVX-512
// F/BW/VL/VNNI; called only on CPUs with them.
#include <immintrin.h>

#include <cstring>

#include "ops/quant_gemm.h"

namespace tessera::ops {
namespace {

inline __m512i Bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

template <int MR>
void Tile(const QuantTile& tile, const uint8_t* codes, const float* a, const float* b, int64_t kc, int64_t sub,
          float* y, int64_t y_stride, int nr, bool accumulate) {
  const __mmask16 m0 = static_cast<__mmask16>(nr >= 16 ? 0xffff : (1u << nr) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(nr >= 32 ? 0xffff : nr <= 16 ? 0 : (1u << (nr - 16)) - 1);
  __m512 acc0[MR], acc1[MR];
  for (int r = 0; r < MR; ++r) {
    acc0[r] = accumulate ? _mm512_maskz_loadu_ps(m0, y + r * y_stride) : _mm512_setzero_ps();
    acc1[r] = accumulate ? _mm512_maskz_loadu_ps(m1, y + r * y_stride + 16) : _mm512_setzero_ps();
  }
  const uint8_t* c0 = codes;
  const uint8_t* c1 = codes + kc * 16;
  const int64_t groups = kc / sub;
  for (int64_t g = 0; g < groups; ++g) {
    // Exact sums, the q_hi pass shifted up 8 bits before the q_lo pass adds into the same lanes
    // (one accumulator per token and panel leaves registers for the f32 sums):
    // |256 sum(code q_hi) + sum(code q_lo)| <= 257 * 32 * 255 * 127 < 2^31.
    __m512i s0[MR], s1[MR];
    for (int r = 0; r < MR; ++r) s0[r] = s1[r] = _mm512_setzero_si512();
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t k = g * sub; k < (g + 1) * sub; k += 4) {
        const __m512i w0 = _mm512_load_si512(c0 + k * 16), w1 = _mm512_load_si512(c1 + k * 16);
        for (int r = 0; r < MR; ++r) {
          const __m512i xb = Bcast4((pass == 0 ? tile.hi[r] : tile.lo[r]) + k);
          s0[r] = _mm512_dpbusd_epi32(s0[r], w0, xb);
          s1[r] = _mm512_dpbusd_epi32(s1[r], w1, xb);
        }
      }
      if (pass == 0)
        for (int r = 0; r < MR; ++r) s0[r] = _mm512_slli_epi32(s0[r], 8), s1[r] = _mm512_slli_epi32(s1[r], 8);
    }
    const __m512 a0 = _mm512_load_ps(a + g * 16), a1 = _mm512_load_ps(a + groups * 16 + g * 16);
    const __m512 b0 = _mm512_load_ps(b + g * 16), b1 = _mm512_load_ps(b + groups * 16 + g * 16);
    for (int r = 0; r < MR; ++r) {
      const __m512 xd = _mm512_set1_ps(tile.xd[r][g * sub / 32]), xs = _mm512_set1_ps(tile.xs[r][g]);
      acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0[r]), _mm512_mul_ps(a0, xd), acc0[r]);
      acc1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1[r]), _mm512_mul_ps(a1, xd), acc1[r]);
      acc0[r] = _mm512_fmadd_ps(b0, xs, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(b1, xs, acc1[r]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(y + r * y_stride, m0, acc0[r]);
    _mm512_mask_storeu_ps(y + r * y_stride + 16, m1, acc1[r]);
  }
}

}  // namespace

void QuantGemmTileAvx512(const QuantTile& tile, int mr, const uint8_t* codes, const float* a, const float* b,
                         int64_t kc, int64_t sub, float* y, int64_t y_stride, int nr, bool accumulate) {
  switch (mr) {
    case 1: return Tile<1>(tile, codes, a, b, kc, sub, y, y_stride, nr, accumulate);
    case 2: return Tile<2>(tile, codes, a, b, kc, sub, y, y_stride, nr, accumulate);
    case 3: return Tile<3>(tile, codes, a, b, kc, sub, y, y_stride, nr, accumulate);
    default: return Tile<4>(tile, codes, a, b, kc, sub, y, y_stride, nr, accumulate);
  }
}

}  // namespace tessera::ops
