// AVX-512 (F + BW + VL) implementation, compiled with those flags and only called when the CPU
// has them. Same rule as simd_avx2.cc: no shared header inline functions or templates here (the
// .inc files are included inside the unnamed namespace: each copy is this file's own).
#include <immintrin.h>

#include "ops/exp_poly.h"
#include "ops/simd.h"

namespace tessera::ops {
namespace {

inline __m512 LoadBf16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 LoadF16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 LoadF32(const float* p) { return _mm512_loadu_ps(p); }

inline float IdF32(float x) { return x; }
inline float Bf16(uint16_t x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
inline float F16(uint16_t x) { return _cvtsh_ss(x); }

template <typename T, __m512 (*Load)(const T*), float (*Scalar)(T)>
float Dot(const float* a, const T* b, int64_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), Load(b + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), Load(b + i + 16), s1);
    s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), Load(b + i + 32), s2);
    s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), Load(b + i + 48), s3);
  }
  for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), Load(b + i), s0);
  float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  for (; i < n; ++i) s += a[i] * Scalar(b[i]);
  return s;
}

template <typename T, __m512 (*Load)(const T*), float (*Scalar)(T)>
void Axpy(float* y, float a, const T* x, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, Load(x + i), _mm512_loadu_ps(y + i)));
    _mm512_storeu_ps(y + i + 16, _mm512_fmadd_ps(va, Load(x + i + 16), _mm512_loadu_ps(y + i + 16)));
  }
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, Load(x + i), _mm512_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * Scalar(x[i]);
}

void Scale(float* y, float a, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(va, _mm512_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= a;
}

// MR (<= 6) rows x 16 columns, one 16-lane accumulator per row: one panel load and MR broadcasts
// per k. MR is the tile's live rows.
template <int MR>
void Tile16(const float* const* a, const float* bp, int64_t kc, float* c, int64_t cs, int nr, bool acc) {
  __m512 rows[MR];
  _Pragma("GCC unroll 6") for (int r = 0; r < MR; ++r) rows[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k, bp += 16) {
    const __m512 b = _mm512_load_ps(bp);
    _Pragma("GCC unroll 6") for (int r = 0; r < MR; ++r) rows[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r][k]), b, rows[r]);
  }
  const __mmask16 m = static_cast<__mmask16>((1u << nr) - 1u);
  _Pragma("GCC unroll 6") for (int r = 0; r < MR; ++r) {
    float* cr = c + r * cs;
    const __m512 v = acc ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, cr), rows[r]) : rows[r];
    _mm512_mask_storeu_ps(cr, m, v);
  }
}

void GemmTile(const float* const* a, const float* bp, int64_t kc, float* c, int64_t cs, int mr, int nr, bool acc,
              const void*, int64_t) {
  switch (mr) {
    case 1: return Tile16<1>(a, bp, kc, c, cs, nr, acc);
    case 2: return Tile16<2>(a, bp, kc, c, cs, nr, acc);
    case 3: return Tile16<3>(a, bp, kc, c, cs, nr, acc);
    case 4: return Tile16<4>(a, bp, kc, c, cs, nr, acc);
    case 5: return Tile16<5>(a, bp, kc, c, cs, nr, acc);
    default: return Tile16<6>(a, bp, kc, c, cs, nr, acc);
  }
}

// A call prefetching more lines than this (16 KiB, half the smallest L1) sends them to L2, as
// gemm_tile does (bench/results/kernel_choices.md, "L1 or L2 prefetch hint").
constexpr int64_t kMaxL1PrefetchLines = 256;

// Line `line` of each prefetched panel.
inline void PrefetchLine(const TilePrefetch& pf, int64_t line, bool to_l2) {
  for (int p = 0; p < pf.panels; ++p) {
    const char* at = reinterpret_cast<const char*>(pf.next + p * pf.stride) + line * 64;
    if (to_l2) {
      _mm_prefetch(at, _MM_HINT_T1);
    } else {
      _mm_prefetch(at, _MM_HINT_T0);
    }
  }
}

// MR (<= 8) rows x 32 columns (two 16-column panels, TWO false: the first only) in 2 MR
// accumulators: per k, two panel loads and MR broadcasts feed 2 MR independent FMAs, enough to keep
// both FMA ports busy through their latency. The prefetches are spread evenly over the k steps.
template <int MR, bool TWO>
void Tile32(const float* const* a, const float* bp, int64_t ps, int64_t kc, float* c, int64_t cs, int nr, bool acc,
            const TilePrefetch& pf) {
  __m512 lo[MR], hi[MR];
  _Pragma("GCC unroll 8") for (int r = 0; r < MR; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  const float* bp1 = bp + ps;
  const int64_t lines = pf.next != nullptr ? pf.lines : 0;
  const int64_t step = lines <= 0 ? kc : kc > lines ? kc / lines : 1;  // k steps per prefetched line
  const bool to_l2 = lines * pf.panels > kMaxL1PrefetchLines;
  int64_t k = 0;
  for (int64_t line = 0; k < kc; ++line) {
    if (line < lines) PrefetchLine(pf, line, to_l2);
    for (const int64_t end = k + step < kc ? k + step : kc; k < end; ++k) {
      const __m512 b0 = _mm512_load_ps(bp + k * 16);
      const __m512 b1 = TWO ? _mm512_load_ps(bp1 + k * 16) : b0;
      _Pragma("GCC unroll 8") for (int r = 0; r < MR; ++r) {
        const __m512 x = _mm512_set1_ps(a[r][k]);
        lo[r] = _mm512_fmadd_ps(x, b0, lo[r]);
        if (TWO) hi[r] = _mm512_fmadd_ps(x, b1, hi[r]);
      }
    }
  }
  // More lines than k steps: the rest now (to L2: only a call with more than 256 lines gets here).
  for (int64_t line = (kc + step - 1) / step; line < lines; ++line) PrefetchLine(pf, line, true);
  const __mmask16 m0 = static_cast<__mmask16>(nr >= 16 ? 0xffffu : (1u << nr) - 1u);
  const __mmask16 m1 = static_cast<__mmask16>(nr >= 32 ? 0xffffu : nr > 16 ? (1u << (nr - 16)) - 1u : 0u);
  _Pragma("GCC unroll 8") for (int r = 0; r < MR; ++r) {
    float* cr = c + r * cs;
    _mm512_mask_storeu_ps(cr, m0, acc ? _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), lo[r]) : lo[r]);
    if (TWO) _mm512_mask_storeu_ps(cr + 16, m1, acc ? _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr + 16), hi[r]) : hi[r]);
  }
}

template <bool TWO>
void Tile32Rows(const float* const* a, const float* bp, int64_t ps, int64_t kc, float* c, int64_t cs, int mr, int nr,
                bool acc, const TilePrefetch& pf) {
  switch (mr) {
    case 1: return Tile32<1, TWO>(a, bp, ps, kc, c, cs, nr, acc, pf);
    case 2: return Tile32<2, TWO>(a, bp, ps, kc, c, cs, nr, acc, pf);
    case 3: return Tile32<3, TWO>(a, bp, ps, kc, c, cs, nr, acc, pf);
    case 4: return Tile32<4, TWO>(a, bp, ps, kc, c, cs, nr, acc, pf);
    case 5: return Tile32<5, TWO>(a, bp, ps, kc, c, cs, nr, acc, pf);
    case 6: return Tile32<6, TWO>(a, bp, ps, kc, c, cs, nr, acc, pf);
    case 7: return Tile32<7, TWO>(a, bp, ps, kc, c, cs, nr, acc, pf);
    default: return Tile32<8, TWO>(a, bp, ps, kc, c, cs, nr, acc, pf);
  }
}

void GemmTile32(const float* const* a, const float* bp, int64_t ps, int64_t kc, float* c, int64_t cs, int mr, int nr,
                bool acc, const TilePrefetch& pf) {
  if (nr > 16) return Tile32Rows<true>(a, bp, ps, kc, c, cs, mr, nr, acc, pf);
  Tile32Rows<false>(a, bp, ps, kc, c, cs, mr, nr, acc, pf);
}

// Eight b values widened into the low lanes (the upper ones are left undefined: masked off).
inline __m512 LoadBf16x8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_castps256_ps512(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
}
inline __m512 LoadF32x8(const float* p) { return _mm512_castps256_ps512(_mm256_loadu_ps(p)); }

#include "ops/hsum8.inc"

// The AVX2 DotRows4 for TOKENS a rows at once. Its two 8-lane chains per b row (elements 0-7 and
// 8-15 of each 16) are the low and high halves of one 16-lane accumulator here, its 8-element tail
// a masked FMA into the low half, its reduction and scalar tail the same steps: the same bits, with
// each b element loaded and widened once for all the tokens, at twice the FMA width.
template <int TOKENS, typename T, __m512 (*Load)(const T*), __m512 (*Load8)(const T*), float (*Scalar)(T)>
void DotRows4Tokens(const float* a, int64_t a_stride, const T* b, int64_t st, int64_t n, float* out) {
  constexpr int kRows = 4;
  __m512 acc[TOKENS][kRows];
  for (int t = 0; t < TOKENS; ++t)
    for (int r = 0; r < kRows; ++r) acc[t][r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 w[kRows];
    for (int r = 0; r < kRows; ++r) w[r] = Load(b + r * st + i);
    for (int t = 0; t < TOKENS; ++t) {
      const __m512 x = _mm512_loadu_ps(a + t * a_stride + i);
      for (int r = 0; r < kRows; ++r) acc[t][r] = _mm512_fmadd_ps(x, w[r], acc[t][r]);
    }
  }
  if (i + 8 <= n) {
    __m512 w[kRows];
    for (int r = 0; r < kRows; ++r) w[r] = Load8(b + r * st + i);
    for (int t = 0; t < TOKENS; ++t) {
      const __m512 x = LoadF32x8(a + t * a_stride + i);
      for (int r = 0; r < kRows; ++r) acc[t][r] = _mm512_mask3_fmadd_ps(x, w[r], acc[t][r], 0x00ff);
    }
    i += 8;
  }
  for (int t = 0; t < TOKENS; ++t) {
    const float* at = a + t * a_stride;
    for (int r = 0; r < kRows; ++r) {
      const __m512 v = acc[t][r];
      const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
      float o = HSum(_mm256_add_ps(_mm512_castps512_ps256(v), high));
      for (int64_t k = i; k < n; ++k) o = __builtin_fmaf(at[k], Scalar(b[r * st + k]), o);
      out[t * 4 + r] = o;
    }
  }
}

// Passes of at most nine tokens over the four rows, as even as they come (10 tokens go 5 + 5). Nine
// (a verification step with eight drafts) keep 36 accumulators, more than the 32 registers: the
// spills cost less than a second pass over the weights, which had made 7-9 tokens 1.5-1.8x a decode
// step against 1.3-1.4x (bench/results/speculative.md).
template <typename T, __m512 (*Load)(const T*), __m512 (*Load8)(const T*), float (*Scalar)(T)>
void DotRows4TokensOf(const float* a, int64_t a_stride, int tokens, const void* b, int64_t st, int64_t n, float* out) {
  constexpr int kMaxPass = 9;
  const T* bt = static_cast<const T*>(b);
  while (tokens > 0) {
    const int passes = (tokens + kMaxPass - 1) / kMaxPass, now = (tokens + passes - 1) / passes;
    switch (now) {
      case 1: DotRows4Tokens<1, T, Load, Load8, Scalar>(a, a_stride, bt, st, n, out); break;
      case 2: DotRows4Tokens<2, T, Load, Load8, Scalar>(a, a_stride, bt, st, n, out); break;
      case 3: DotRows4Tokens<3, T, Load, Load8, Scalar>(a, a_stride, bt, st, n, out); break;
      case 4: DotRows4Tokens<4, T, Load, Load8, Scalar>(a, a_stride, bt, st, n, out); break;
      case 5: DotRows4Tokens<5, T, Load, Load8, Scalar>(a, a_stride, bt, st, n, out); break;
      case 6: DotRows4Tokens<6, T, Load, Load8, Scalar>(a, a_stride, bt, st, n, out); break;
      case 7: DotRows4Tokens<7, T, Load, Load8, Scalar>(a, a_stride, bt, st, n, out); break;
      case 8: DotRows4Tokens<8, T, Load, Load8, Scalar>(a, a_stride, bt, st, n, out); break;
      default: DotRows4Tokens<kMaxPass, T, Load, Load8, Scalar>(a, a_stride, bt, st, n, out); break;
    }
    tokens -= now, a += now * a_stride, out += 4 * now;
  }
}

void DotRows4TokensAny(DType dtype, const float* a, int64_t a_stride, int tokens, const void* b, int64_t st, int64_t n,
                       float* out) {
  if (dtype == DType::kBF16)
    return DotRows4TokensOf<uint16_t, LoadBf16, LoadBf16x8, Bf16>(a, a_stride, tokens, b, st, n, out);
  DotRows4TokensOf<float, LoadF32, LoadF32x8, IdF32>(a, a_stride, tokens, b, st, n, out);
}

#include "ops/exp16_avx512.inc"

// s[i] = exp(s[i] - m) for i < n, returning their sum; the tail loaded and stored masked.
float ExpSubSum(float* s, int64_t n, float m) {
  const __m512 vm = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(s + i), vm));
    _mm512_storeu_ps(s + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    const __mmask16 live = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 e = _mm512_maskz_mov_ps(live, Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, s + i), vm)));
    _mm512_mask_storeu_ps(s + i, live, e);
    acc = _mm512_add_ps(acc, e);
  }
  return _mm512_reduce_add_ps(acc);
}

// tanh and GELU as the AVX2 table computes them (simd_avx2.cc: Tanh, GeluTanhMul), the same
// operations lane for lane on 16 lanes, so every element gets the AVX2 table's bits. The last
// n % 16 elements go to the AVX2 kernel itself, whose own tail (under 8) is scalar.
// (The sign bit by integer logic: this file is built with AVX-512 F, whose float and/or are DQ's.)
inline __m512 Tanh16(__m512 z) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u)), zi = _mm512_castps_si512(z);
  const __m512 a = _mm512_castsi512_ps(_mm512_andnot_si512(sign, zi));
  const __m512 e = Exp16(_mm512_min_ps(_mm512_add_ps(a, a), _mm512_set1_ps(88.0f)));
  const __m512 t =
      _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), _mm512_and_si512(sign, zi)));
}

void GeluTanhMul(const float* g, const float* u, int64_t n, float* out) {
  const __m512 c = _mm512_set1_ps(0.7978845608028654f), k = _mm512_set1_ps(0.044715f), half = _mm512_set1_ps(0.5f),
               one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(g + i);
    const __m512 inner = _mm512_mul_ps(c, _mm512_fmadd_ps(_mm512_mul_ps(k, x), _mm512_mul_ps(x, x), x));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, Tanh16(inner)));
    if (u) y = _mm512_mul_ps(y, _mm512_loadu_ps(u + i));
    _mm512_storeu_ps(out + i, y);
  }
  if (i < n) SimdAvx2()->gelu_tanh_mul(g + i, u ? u + i : nullptr, n - i, out + i);
}

}  // namespace

// Single-row kernels, the micro-tile and the softmax's exp at 16 lanes; the multi-row, packing and
// the other elementwise entries are the AVX2 kernels (every AVX-512 CPU has AVX2, which measured
// faster here; they keep the table full).
const SimdKernels* SimdAvx512() {
  static const SimdKernels k{"avx512",
                             Dot<float, LoadF32, IdF32>,
                             Dot<uint16_t, LoadBf16, Bf16>,
                             Dot<uint16_t, LoadF16, F16>,
                             Axpy<float, LoadF32, IdF32>,
                             Axpy<uint16_t, LoadBf16, Bf16>,
                             Axpy<uint16_t, LoadF16, F16>,
                             Scale,
                             SimdAvx2()->dot_rows4_f32,
                             SimdAvx2()->dot_rows4_bf16,
                             SimdAvx2()->dot_rows4_f16,
                             SimdAvx2()->dot2_f32,
                             SimdAvx2()->dot2_bf16,
                             SimdAvx2()->dot2_f16,
                             SimdAvx2()->axpy4_f32,
                             SimdAvx2()->axpy4_bf16,
                             SimdAvx2()->axpy4_f16,
                             GemmTile,
                             SimdAvx2()->gemm_tile_b,
                             SimdAvx2()->pack_rows16,
                             SimdAvx2()->row_max,
                             ExpSubSum,
                             GeluTanhMul,
                             SimdAvx2()->pack_panel16,
                             SimdAvx2()->soft_cap,
                             SimdAvx2()->round_bf16,
                             SimdAvx2()->widen_bf16};
  return &k;
}

GemmTileWideFn GemmTileWideAvx512() { return GemmTile32; }

DotRows4TokensFn DotRows4TokensAvx512() { return DotRows4TokensAny; }

}  // namespace tessera::ops
