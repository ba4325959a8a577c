// The int8 GEMM's micro-tile (ops/quant_gemm.h) on AVX-512 VNNI: vpdpbusd adds four unsigned code x
// signed activation byte products into each of 16 lanes (one lane per weight row), so a k step of 4
// is one instruction per token, panel and activation byte (q_hi, q_lo) with the token's 4 bytes
// broadcast. Compiled with AVX-512
// F/BW/VL/VNNI; called only on CPUs with them.
#include <immintrin.h>

#include <cstring>

#include "ops/quant_gemm.h"
#include "tessera/check.h"
#include "tessera/quant.h"

namespace tessera::ops {
namespace {

#include "ops/transpose16_avx512.inc"

inline __m512i Bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// kPasses: the activation bytes per value (2: q_hi then q_lo; 1: q_hi alone). kCentered: the
// weights' offsets are in xs, each term a (xd isum + xs) (quant_gemm.h).
template <int MR, int kPasses, bool kCentered>
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
    for (int pass = 0; pass < kPasses; ++pass) {
      for (int64_t k = g * sub; k < (g + 1) * sub; k += 4) {
        const __m512i w0 = _mm512_load_si512(c0 + k * 16), w1 = _mm512_load_si512(c1 + k * 16);
        for (int r = 0; r < MR; ++r) {
          const __m512i xb = Bcast4((pass == 0 ? tile.hi[r] : tile.lo[r]) + k);
          s0[r] = _mm512_dpbusd_epi32(s0[r], w0, xb);
          s1[r] = _mm512_dpbusd_epi32(s1[r], w1, xb);
        }
      }
      if (pass == 0 && kPasses == 2)
        for (int r = 0; r < MR; ++r) s0[r] = _mm512_slli_epi32(s0[r], 8), s1[r] = _mm512_slli_epi32(s1[r], 8);
    }
    const __m512 a0 = _mm512_load_ps(a + g * 16), a1 = _mm512_load_ps(a + groups * 16 + g * 16);
    // b is not read (nor written by the unpackers) where the offsets fold into xs.
    const __m512 b0 = kCentered ? _mm512_setzero_ps() : _mm512_load_ps(b + g * 16);
    const __m512 b1 = kCentered ? _mm512_setzero_ps() : _mm512_load_ps(b + groups * 16 + g * 16);
    for (int r = 0; r < MR; ++r) {
      const __m512 xd = _mm512_set1_ps(tile.xd[r][g * sub / 32]), xs = _mm512_set1_ps(tile.xs[r][g]);
      if constexpr (kCentered) {
        acc0[r] = _mm512_fmadd_ps(a0, _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0[r]), xd, xs), acc0[r]);
        acc1[r] = _mm512_fmadd_ps(a1, _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1[r]), xd, xs), acc1[r]);
      } else {
        acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0[r]), _mm512_mul_ps(a0, xd), acc0[r]);
        acc1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1[r]), _mm512_mul_ps(a1, xd), acc1[r]);
        acc0[r] = _mm512_fmadd_ps(b0, xs, acc0[r]);
        acc1[r] = _mm512_fmadd_ps(b1, xs, acc1[r]);
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(y + r * y_stride, m0, acc0[r]);
    _mm512_mask_storeu_ps(y + r * y_stride + 16, m1, acc1[r]);
  }
}

// 16 bytes of nibbles -> their 16 low codes then their 16 high codes (the 4- and 5-bit formats' order).
inline __m256i Nibbles(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)), m = _mm_set1_epi8(0x0f);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m)),
                                 _mm_and_si128(_mm_srli_epi16(v, 4), m), 1);
}

void Codes32(QuantType t, const uint8_t* blk, uint8_t* c) {
  __m256i v;
  if (t == QuantType::kQ8_0) {
    v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)), _mm256_set1_epi8(-128));
  } else if (t == QuantType::kQ5_0 || t == QuantType::kQ5_1) {
    const int head = t == QuantType::kQ5_1 ? 4 : 2;  // d (and m) before qh
    uint32_t qh;
    std::memcpy(&qh, blk + head, 4);
    v = Nibbles(blk + head + 4);
    v = _mm256_mask_add_epi8(v, static_cast<__mmask32>(qh), v, _mm256_set1_epi8(16));
  } else {
    v = Nibbles(blk + (t == QuantType::kQ4_1 ? 4 : 2));
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(c), v);
}

// Q4_K / Q5_K: chunk ch's 32 bytes give sub-block 2ch (low nibbles) and 2ch + 1 (high nibbles).
void CodesK45(bool five, const uint8_t* blk, uint8_t* c) {
  const uint8_t* qs = blk + (five ? 48 : 16);
  const __m256i m = _mm256_set1_epi8(0x0f), qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
  for (int ch = 0; ch < 4; ++ch) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * ch));
    __m256i lo = _mm256_and_si256(v, m), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
    if (five) {
      const __m256i sixteen = _mm256_set1_epi8(16);
      lo = _mm256_mask_add_epi8(lo, _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * ch)))), lo,
                                sixteen);
      hi = _mm256_mask_add_epi8(hi, _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(2 << (2 * ch)))), hi,
                                sixteen);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 64 * ch), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 64 * ch + 32), hi);
  }
}

// Q6_K: per half of 128, four runs of 32 codes, low nibbles from ql and two high bits from qh.
void CodesQ6K(const uint8_t* blk, uint8_t* c) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
  for (int half = 0; half < 2; ++half, c += 128) {
    const uint8_t* ql = blk + 64 * half;
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * half));
    const __m256i out[4] = {
        _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m2)),
        _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m2)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_and_si256(h, m2)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), _mm256_and_si256(_mm256_srli_epi16(h, 2), m2))};
    for (int k = 0; k < 4; ++k) _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 32 * k), out[k]);
  }
}

}  // namespace

void UnpackCodesAvx512(QuantType t, const void* row, int64_t k0, int64_t kc, uint8_t* codes) {
  const int64_t be = QuantBlockElems(t), bb = QuantBlockBytes(t);
  const uint8_t* blk = static_cast<const uint8_t*>(row) + k0 / be * bb;
  for (int64_t i = 0; i < kc / be; ++i, blk += bb, codes += be) {
    switch (t) {
      case QuantType::kQ4_K:
      case QuantType::kQ5_K: CodesK45(t == QuantType::kQ5_K, blk, codes); break;
      case QuantType::kQ6_K: CodesQ6K(blk, codes); break;
      default: Codes32(t, blk, codes); break;
    }
  }
}

namespace {

// Q4_K and Q5_K: per 32-value sub-block j, a = d * sc_j and b = -(dmin * m_j), from the super-block
// headers (one gather per header word).
void UnpackScalesK45(QuantType t, const uint8_t* row0, __m512i off, __mmask16 live, int64_t k0, int64_t kc, float* a,
                     float* b) {
  const __m512i m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3);
  const __m512i zero = _mm512_setzero_si512(), sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const int64_t bb = QuantBlockBytes(t);  // Q4_K and Q5_K start with the same 16-byte header
  const uint8_t* blk = row0 + k0 / 256 * bb;
  for (int64_t i = 0; i < kc / 256; ++i, blk += bb, a += 8 * 16, b += 8 * 16) {
    // One super-block header per lane: d | dmin, then the twelve 6-bit scale / min bytes.
    const __m512i h = _mm512_mask_i32gather_epi32(zero, live, off, blk, 1);
    const __m512i s0 = _mm512_mask_i32gather_epi32(zero, live, off, blk + 4, 1);
    const __m512i s1 = _mm512_mask_i32gather_epi32(zero, live, off, blk + 8, 1);
    const __m512i s2 = _mm512_mask_i32gather_epi32(zero, live, off, blk + 12, 1);
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
    const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16)));
    for (int j = 0; j < 8; ++j) {
      const int sh = 8 * (j & 3);
      __m512i sc, m;
      if (j < 4) {  // as ScaleMin: the low 6 bits of bytes j and j + 4
        sc = _mm512_and_si512(_mm512_srli_epi32(s0, sh), m6);
        m = _mm512_and_si512(_mm512_srli_epi32(s1, sh), m6);
      } else {  // 4 bits of byte j + 4, 2 high bits of bytes j - 4 (scale) and j (min)
        sc = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, sh), m4),
                             _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s0, sh + 6), m2), 4));
        m = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, sh + 4), m4),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s1, sh + 6), m2), 4));
      }
      // b = -(dmin * m), the sign flipped as the scalar negation flips it (zero becomes -0).
      const __m512i bm = _mm512_castps_si512(_mm512_mul_ps(dmin, _mm512_cvtepi32_ps(m)));
      _mm512_store_ps(a + j * 16, _mm512_maskz_mul_ps(live, d, _mm512_cvtepi32_ps(sc)));
      _mm512_store_ps(b + j * 16, _mm512_maskz_mov_ps(live, _mm512_castsi512_ps(_mm512_xor_si512(bm, sign))));
    }
  }
}

// The 32-value formats: per block one a = d, and for Q4_1 / Q5_1 b = m, from one 4-byte gather of
// each lane's block start (d, then m or the first codes). The others' b (the offset times d) is
// folded into the activations' xs (QuantGemmXsScale) and not written.
void UnpackScales32(QuantType t, const uint8_t* row0, __m512i off, __mmask16 live, int64_t k0, int64_t kc, float* a,
                    float* b) {
  const bool has_min = t == QuantType::kQ4_1 || t == QuantType::kQ5_1;
  const int64_t bb = QuantBlockBytes(t);
  const uint8_t* blk = row0 + k0 / 32 * bb;
  for (int64_t i = 0; i < kc / 32; ++i, blk += bb, a += 16, b += 16) {
    const __m512i h = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, off, blk, 1);
    _mm512_store_ps(a, _mm512_maskz_mov_ps(live, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h))));
    if (has_min) _mm512_store_ps(b, _mm512_maskz_mov_ps(live, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16)))));
  }
}

// Q6_K: per 16-value sub-block g, a = d * sc[g] (b = -32 a is folded into xs). d is the block's
// last two bytes, gathered from two bytes before so that no lane reads past its block.
void UnpackScalesQ6K(const uint8_t* row0, __m512i off, __mmask16 live, int64_t k0, int64_t kc, float* a) {
  const int64_t bb = QuantBlockBytes(QuantType::kQ6_K);
  const __m512i zero = _mm512_setzero_si512();
  const uint8_t* blk = row0 + k0 / 256 * bb;
  for (int64_t i = 0; i < kc / 256; ++i, blk += bb, a += 16 * 16) {
    const __m512 d = _mm512_cvtph_ps(
        _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_mask_i32gather_epi32(zero, live, off, blk + 206, 1), 16)));
    for (int q = 0; q < 4; ++q) {  // scales 4q .. 4q + 3, signed bytes of one dword
      const __m512i sc4 = _mm512_mask_i32gather_epi32(zero, live, off, blk + 192 + 4 * q, 1);
      for (int j = 0; j < 4; ++j) {
        const int g = 4 * q + j;
        const __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(sc4, 24 - 8 * j), 24);
        _mm512_store_ps(a + g * 16, _mm512_maskz_mul_ps(live, d, _mm512_cvtepi32_ps(sc)));
      }
    }
  }
}

}  // namespace

void UnpackScalesAvx512(QuantType t, const void* row0, int64_t row_bytes, int rows, int64_t k0, int64_t kc, float* a,
                        float* b) {
  const __mmask16 live = static_cast<__mmask16>(rows >= 16 ? 0xffff : (1u << rows) - 1);
  const __m512i off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(static_cast<int>(row_bytes)));
  const auto* row = static_cast<const uint8_t*>(row0);
  if (t == QuantType::kQ4_K || t == QuantType::kQ5_K) return UnpackScalesK45(t, row, off, live, k0, kc, a, b);
  if (t == QuantType::kQ6_K) return UnpackScalesQ6K(row, off, live, k0, kc, a);
  TESSERA_CHECK(QuantBlockElems(t) == 32, "UnpackScalesAvx512: not a block-quantized type");
  UnpackScales32(t, row, off, live, k0, kc, a, b);
}

void TransposeCodesAvx512(const uint8_t* rows, int64_t stride, int64_t kc, uint8_t* panel) {
  TESSERA_CHECK(kc % 16 == 0, "TransposeCodesAvx512: kc must be a multiple of 16");
  for (int64_t j = 0; j < kc / 16; ++j) {  // codes 16j .. 16j + 15 of the rows: panel steps 4j .. 4j + 3
    __m512i v[4];
    TransposeRows16([&](int r) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + r * stride + 16 * j)); },
                    v);
    for (int m = 0; m < 4; ++m) _mm512_store_si512(panel + 64 * (4 * j + m), v[m]);
  }
}

void QuantizeResidualAvx512(const float* x, const ActBlock32* blocks, int64_t nb, int64_t sub, int8_t* hi,
                            int8_t* lo, float* xd, float* xs, float xs_scale) {
  const __m512 magic = _mm512_set1_ps(12582912.0f), top = _mm512_set1_ps(127.0f), bottom = _mm512_set1_ps(-127.0f);
  for (int64_t j = 0; j < nb; ++j, x += 32, hi += 32, lo += 32) {
    const float d = blocks[j].d, dl = d * (1.0f / 256);
    std::memcpy(hi, blocks[j].q, 32);
    const __mmask16 live = dl > 0 ? 0xffff : 0;  // as the reference: no residual where dl is 0 or NaN
    const __m512 vd = _mm512_set1_ps(d), vdl = _mm512_set1_ps(dl);
    __m512i sums[2];
    for (int h = 0; h < 2; ++h) {
      const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[j].q + 16 * h)));
      // The product rounded on its own, as the reference rounds it (a plain multiply could be fused
      // into the subtraction).
      const __m512 dq = _mm512_mul_round_ps(vd, _mm512_cvtepi32_ps(q), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512 v = _mm512_maskz_div_ps(live, _mm512_sub_ps(_mm512_loadu_ps(x + 16 * h), dq), vdl);
      // min(r, 127) keeps 127 for a NaN r, as std::min(127.0f, r) does.
      const __m512 r = _mm512_max_ps(_mm512_min_ps(_mm512_sub_ps(_mm512_add_ps(v, magic), magic), top), bottom);
      const __m512i l = _mm512_cvtps_epi32(r);  // whole numbers: exact
      _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + 16 * h), _mm512_cvtepi32_epi8(l));
      sums[h] = _mm512_add_epi32(_mm512_slli_epi32(q, 8), l);
    }
    xd[j] = dl;
    if (sub == 32) {
      xs[j] = dl * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(sums[0], sums[1]))) * xs_scale;
    } else {
      xs[2 * j] = dl * static_cast<float>(_mm512_reduce_add_epi32(sums[0])) * xs_scale;
      xs[2 * j + 1] = dl * static_cast<float>(_mm512_reduce_add_epi32(sums[1])) * xs_scale;
    }
  }
}

template <int kPasses, bool kCentered>
void TileFor(const QuantTile& tile, int mr, const uint8_t* codes, const float* a, const float* b, int64_t kc,
             int64_t sub, float* y, int64_t y_stride, int nr, bool accumulate) {
  switch (mr) {
    case 1: return Tile<1, kPasses, kCentered>(tile, codes, a, b, kc, sub, y, y_stride, nr, accumulate);
    case 2: return Tile<2, kPasses, kCentered>(tile, codes, a, b, kc, sub, y, y_stride, nr, accumulate);
    case 3: return Tile<3, kPasses, kCentered>(tile, codes, a, b, kc, sub, y, y_stride, nr, accumulate);
    default: return Tile<4, kPasses, kCentered>(tile, codes, a, b, kc, sub, y, y_stride, nr, accumulate);
  }
}

void QuantGemmTileAvx512(const QuantTile& tile, int mr, const uint8_t* codes, const float* a, const float* b,
                         int64_t kc, int64_t sub, float* y, int64_t y_stride, int nr, bool accumulate,
                         QuantActBytes bytes, bool centered) {
  const bool one = bytes == QuantActBytes::kOne;
  if (centered) {
    return one ? TileFor<1, true>(tile, mr, codes, a, b, kc, sub, y, y_stride, nr, accumulate)
               : TileFor<2, true>(tile, mr, codes, a, b, kc, sub, y, y_stride, nr, accumulate);
  }
  return one ? TileFor<1, false>(tile, mr, codes, a, b, kc, sub, y, y_stride, nr, accumulate)
             : TileFor<2, false>(tile, mr, codes, a, b, kc, sub, y, y_stride, nr, accumulate);
}

}  // namespace tessera::ops
