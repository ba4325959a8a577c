// AVX2 + FMA + F16C implementation (compiled with those flags; only called when the CPU has
// them). Four 8-lane accumulators hide FMA latency. This file must not instantiate header inline
// functions or templates shared with other files: the linker could keep this ISA's copy for all.
#include <immintrin.h>

#include "ops/exp_poly.h"
#include "ops/simd.h"

namespace tessera::ops {
namespace {

inline __m256 LoadBf16(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 LoadF16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 LoadF32(const float* p) { return _mm256_loadu_ps(p); }

#include "ops/hsum8.inc"

template <typename T, __m256 (*Load)(const T*), float (*Scalar)(T)>
float Dot(const float* a, const T* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), Load(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), Load(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), Load(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), Load(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), Load(b + i), s0);
  float s = HSum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; ++i) s += a[i] * Scalar(b[i]);
  return s;
}

template <typename T, __m256 (*Load)(const T*), float (*Scalar)(T)>
void Axpy(float* y, float a, const T* x, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, Load(x + i), _mm256_loadu_ps(y + i)));
    _mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(va, Load(x + i + 8), _mm256_loadu_ps(y + i + 8)));
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, Load(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * Scalar(x[i]);
}

inline float IdF32(float x) { return x; }
inline float Bf16(uint16_t x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
inline float F16(uint16_t x) { return _cvtsh_ss(x); }

void Scale(float* y, float a, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= a;
}

// Four b rows against one a: 8 accumulators (4 rows x 2 chains), one a load per 4 rows.
template <typename T, __m256 (*Load)(const T*), float (*Scalar)(T)>
void DotRows4(const float* a, const T* b, int64_t st, int64_t n, float* out) {
  const T *b0 = b, *b1 = b + st, *b2 = b + 2 * st, *b3 = b + 3 * st;
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, t0 = s0, t1 = s0, t2 = s0, t3 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 x0 = _mm256_loadu_ps(a + i), x1 = _mm256_loadu_ps(a + i + 8);
    s0 = _mm256_fmadd_ps(x0, Load(b0 + i), s0);
    s1 = _mm256_fmadd_ps(x0, Load(b1 + i), s1);
    s2 = _mm256_fmadd_ps(x0, Load(b2 + i), s2);
    s3 = _mm256_fmadd_ps(x0, Load(b3 + i), s3);
    t0 = _mm256_fmadd_ps(x1, Load(b0 + i + 8), t0);
    t1 = _mm256_fmadd_ps(x1, Load(b1 + i + 8), t1);
    t2 = _mm256_fmadd_ps(x1, Load(b2 + i + 8), t2);
    t3 = _mm256_fmadd_ps(x1, Load(b3 + i + 8), t3);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 x0 = _mm256_loadu_ps(a + i);
    s0 = _mm256_fmadd_ps(x0, Load(b0 + i), s0);
    s1 = _mm256_fmadd_ps(x0, Load(b1 + i), s1);
    s2 = _mm256_fmadd_ps(x0, Load(b2 + i), s2);
    s3 = _mm256_fmadd_ps(x0, Load(b3 + i), s3);
  }
  out[0] = HSum(_mm256_add_ps(s0, t0));
  out[1] = HSum(_mm256_add_ps(s1, t1));
  out[2] = HSum(_mm256_add_ps(s2, t2));
  out[3] = HSum(_mm256_add_ps(s3, t3));
  for (; i < n; ++i) {  // (fused, as -O2 contracts it anyway: DotRows4Tokens repeats these steps)
    out[0] = __builtin_fmaf(a[i], Scalar(b0[i]), out[0]);
    out[1] = __builtin_fmaf(a[i], Scalar(b1[i]), out[1]);
    out[2] = __builtin_fmaf(a[i], Scalar(b2[i]), out[2]);
    out[3] = __builtin_fmaf(a[i], Scalar(b3[i]), out[3]);
  }
}

// Two a rows against one b row: b widened once per 8 elements, 4 accumulators (2 per row), both
// horizontal sums in one pass.
template <typename T, __m256 (*Load)(const T*), float (*Scalar)(T)>
void Dot2(const float* a0, const float* a1, const T* b, int64_t n, float* out) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, t0 = s0, t1 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 b0 = Load(b + i), b1 = Load(b + i + 8);
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + i), b0, s0);
    t0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + i + 8), b1, t0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1 + i), b0, s1);
    t1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1 + i + 8), b1, t1);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 b0 = Load(b + i);
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + i), b0, s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1 + i), b0, s1);
  }
  __m256 h = _mm256_hadd_ps(_mm256_add_ps(s0, t0), _mm256_add_ps(s1, t1));  // pairs of row 0, row 1
  h = _mm256_hadd_ps(h, h);
  const __m128 r = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  out[0] = _mm_cvtss_f32(r);
  out[1] = _mm_cvtss_f32(_mm_shuffle_ps(r, r, 1));
  for (; i < n; ++i) {
    const float x = Scalar(b[i]);
    out[0] += a0[i] * x;
    out[1] += a1[i] * x;
  }
}

template <typename T, __m256 (*Load)(const T*), float (*Scalar)(T)>
void Axpy4(float* y, const float* w, const void* const* xv, int64_t n) {
  const T* x0 = static_cast<const T*>(xv[0]);
  const T* x1 = static_cast<const T*>(xv[1]);
  const T* x2 = static_cast<const T*>(xv[2]);
  const T* x3 = static_cast<const T*>(xv[3]);
  const __m256 w0 = _mm256_set1_ps(w[0]), w1 = _mm256_set1_ps(w[1]), w2 = _mm256_set1_ps(w[2]),
               w3 = _mm256_set1_ps(w[3]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 acc = _mm256_loadu_ps(y + i);
    acc = _mm256_fmadd_ps(w0, Load(x0 + i), acc);
    acc = _mm256_fmadd_ps(w1, Load(x1 + i), acc);
    acc = _mm256_fmadd_ps(w2, Load(x2 + i), acc);
    acc = _mm256_fmadd_ps(w3, Load(x3 + i), acc);
    _mm256_storeu_ps(y + i, acc);
  }
  for (; i < n; ++i) y[i] += w[0] * Scalar(x0[i]) + w[1] * Scalar(x1[i]) + w[2] * Scalar(x2[i]) + w[3] * Scalar(x3[i]);
}

// A call prefetching more than this many lines (16 KiB, half the L1) sends them to L2 (T1) instead
// of L1, where they would evict the x rows and the panel being read
// (bench/results/kernel_choices.md, "L1 or L2 prefetch hint").
constexpr int64_t kMaxL1PrefetchLines = 256;

// MR (<= 6) rows x 16 columns in 2 MR accumulators: per k, two panel loads and MR broadcasts feed
// 2 MR FMAs. MR is the tile's live rows, so a decode token (one row) does one row of FMAs. The
// pf_lines prefetches are spread evenly over the k steps.
template <int MR>
void Tile16(const float* const* a, const float* bp, int64_t kc, float* c, int64_t cs, int nr, bool acc, const char* pf,
            int64_t pf_lines) {
  __m256 lo[MR], hi[MR];
  _Pragma("GCC unroll 6") for (int r = 0; r < MR; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  const int64_t step = pf_lines <= 0 ? kc : kc > pf_lines ? kc / pf_lines : 1;  // k steps per prefetch
  const bool to_l2 = pf_lines > kMaxL1PrefetchLines;
  int64_t k = 0;
  for (int64_t line = 0; k < kc; ++line) {
    if (line < pf_lines) {
      if (to_l2) {
        _mm_prefetch(pf + line * 64, _MM_HINT_T1);
      } else {
        _mm_prefetch(pf + line * 64, _MM_HINT_T0);
      }
    }
    for (const int64_t end = k + step < kc ? k + step : kc; k < end; ++k, bp += 16) {
      const __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
      _Pragma("GCC unroll 6") for (int r = 0; r < MR; ++r) {
        const __m256 x = _mm256_broadcast_ss(a[r] + k);
        lo[r] = _mm256_fmadd_ps(x, b0, lo[r]);
        hi[r] = _mm256_fmadd_ps(x, b1, hi[r]);
      }
    }
  }
  // More lines than k steps: the rest now (to L2: only a call with more than 256 lines gets here).
  for (int64_t line = (kc + step - 1) / step; line < pf_lines; ++line) _mm_prefetch(pf + line * 64, _MM_HINT_T1);
  _Pragma("GCC unroll 6") for (int r = 0; r < MR; ++r) {
    float* cr = c + r * cs;
    if (nr == 16) {
      _mm256_storeu_ps(cr, acc ? _mm256_add_ps(_mm256_loadu_ps(cr), lo[r]) : lo[r]);
      _mm256_storeu_ps(cr + 8, acc ? _mm256_add_ps(_mm256_loadu_ps(cr + 8), hi[r]) : hi[r]);
    } else {
      alignas(32) float t[16];
      _mm256_store_ps(t, lo[r]), _mm256_store_ps(t + 8, hi[r]);
      for (int j = 0; j < nr; ++j) cr[j] = acc ? cr[j] + t[j] : t[j];
    }
  }
}

void GemmTile(const float* const* a, const float* bp, int64_t kc, float* c, int64_t cs, int mr, int nr, bool acc,
              const void* prefetch, int64_t prefetch_lines) {
  const char* pf = static_cast<const char*>(prefetch);
  switch (mr) {
    case 1: return Tile16<1>(a, bp, kc, c, cs, nr, acc, pf, prefetch_lines);
    case 2: return Tile16<2>(a, bp, kc, c, cs, nr, acc, pf, prefetch_lines);
    case 3: return Tile16<3>(a, bp, kc, c, cs, nr, acc, pf, prefetch_lines);
    case 4: return Tile16<4>(a, bp, kc, c, cs, nr, acc, pf, prefetch_lines);
    case 5: return Tile16<5>(a, bp, kc, c, cs, nr, acc, pf, prefetch_lines);
    default: return Tile16<6>(a, bp, kc, c, cs, nr, acc, pf, prefetch_lines);
  }
}

// MR rows x 16 columns with B read in place (stored dtype, row stride ldb), two 8-lane
// accumulators per row; MR is a compile-time constant so short row groups waste no FMAs.
template <int MR, typename T, __m256 (*Load)(const T*)>
void TileB16(const float* const* a, const T* b, int64_t ldb, int64_t kc, float* c, int64_t cs, bool acc) {
  __m256 lo[MR], hi[MR];
  for (int r = 0; r < MR; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k, b += ldb) {
    const __m256 b0 = Load(b), b1 = Load(b + 8);
    for (int r = 0; r < MR; ++r) {
      const __m256 x = _mm256_broadcast_ss(a[r] + k);
      lo[r] = _mm256_fmadd_ps(x, b0, lo[r]);
      hi[r] = _mm256_fmadd_ps(x, b1, hi[r]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * cs;
    _mm256_storeu_ps(cr, acc ? _mm256_add_ps(_mm256_loadu_ps(cr), lo[r]) : lo[r]);
    _mm256_storeu_ps(cr + 8, acc ? _mm256_add_ps(_mm256_loadu_ps(cr + 8), hi[r]) : hi[r]);
  }
}

// Column tails (nr < 16, head dims that are not a multiple of 16): the same FMA chains, scalar.
template <typename T, float (*Scalar)(T)>
void TileBTail(const float* const* a, const T* b, int64_t ldb, int64_t kc, float* c, int64_t cs, int mr, int nr,
               bool acc) {
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j) {
      float t = 0.0f;
      for (int64_t k = 0; k < kc; ++k) t = __builtin_fmaf(a[r][k], Scalar(b[k * ldb + j]), t);
      c[r * cs + j] = acc ? c[r * cs + j] + t : t;
    }
}

template <typename T, __m256 (*Load)(const T*), float (*Scalar)(T)>
void TileBRows(const float* const* a, const T* b, int64_t ldb, int64_t kc, float* c, int64_t cs, int mr, int nr,
               bool acc) {
  if (nr < 16) return TileBTail<T, Scalar>(a, b, ldb, kc, c, cs, mr, nr, acc);
  switch (mr) {
    case 1: return TileB16<1, T, Load>(a, b, ldb, kc, c, cs, acc);
    case 2: return TileB16<2, T, Load>(a, b, ldb, kc, c, cs, acc);
    case 3: return TileB16<3, T, Load>(a, b, ldb, kc, c, cs, acc);
    case 4: return TileB16<4, T, Load>(a, b, ldb, kc, c, cs, acc);
    case 5: return TileB16<5, T, Load>(a, b, ldb, kc, c, cs, acc);
    default: return TileB16<6, T, Load>(a, b, ldb, kc, c, cs, acc);
  }
}

void GemmTileB(DType dtype, const float* const* a, const void* b, int64_t ldb, int64_t kc, float* c, int64_t cs, int mr,
               int nr, bool acc) {
  if (dtype == DType::kF32) return TileBRows<float, LoadF32, IdF32>(a, static_cast<const float*>(b), ldb, kc, c, cs, mr, nr, acc);
  if (dtype == DType::kBF16)
    return TileBRows<uint16_t, LoadBf16, Bf16>(a, static_cast<const uint16_t*>(b), ldb, kc, c, cs, mr, nr, acc);
  TileBRows<uint16_t, LoadF16, F16>(a, static_cast<const uint16_t*>(b), ldb, kc, c, cs, mr, nr, acc);
}

template <typename T, __m256 (*Load)(const T*), float (*Scalar)(T)>
void PackRows(const T* src, int64_t st, int64_t rows, int64_t cols, float* dst) {
  for (int64_t p = 0; p * 16 < cols; ++p) {
    const int64_t w = cols - p * 16;
    float* d = dst + p * rows * 16;
    const T* s = src + p * 16;
    if (w >= 16) {
      for (int64_t t = 0; t < rows; ++t, d += 16, s += st) {
        _mm256_store_ps(d, Load(s));
        _mm256_store_ps(d + 8, Load(s + 8));
      }
    } else {
      for (int64_t t = 0; t < rows; ++t, d += 16, s += st)
        for (int64_t j = 0; j < 16; ++j) d[j] = j < w ? Scalar(s[j]) : 0.0f;
    }
  }
}

void PackRows16(DType dtype, const void* src, int64_t st, int64_t rows, int64_t cols, float* dst) {
  if (dtype == DType::kF32) return PackRows<float, LoadF32, IdF32>(static_cast<const float*>(src), st, rows, cols, dst);
  if (dtype == DType::kBF16) return PackRows<uint16_t, LoadBf16, Bf16>(static_cast<const uint16_t*>(src), st, rows, cols, dst);
  PackRows<uint16_t, LoadF16, F16>(static_cast<const uint16_t*>(src), st, rows, cols, dst);
}

// exp(x) for 8 lanes (ops/exp_poly.h); the softmax never passes positive arguments, but inputs
// are clamped all the same.
inline __m256 Exp(__m256 x) {
  namespace e = exp_poly;
  const __m256 too_small = _mm256_cmp_ps(x, _mm256_set1_ps(e::kMin), _CMP_LT_OQ);
  // (maxps/minps return their second operand when either is NaN: a NaN x goes through as NaN.)
  x = _mm256_min_ps(_mm256_set1_ps(e::kMax), _mm256_max_ps(_mm256_set1_ps(e::kMin), x));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(e::kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(e::kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(e::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(e::kCoeffs[0]);
  for (int k = 1; k < 8; ++k) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(e::kCoeffs[k]));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(too_small, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

// Two registers of running maxima. maxps(x, m) returns m when x is NaN or not larger, exactly the
// scalar `m < x ? x : m`; non-finite values are found from their exponent bits. The last partial
// register is loaded masked, its dead lanes -inf and left out of the flag.
float RowMax(const float* s, int64_t n, uint32_t* bad) {
  const __m256i expo = _mm256_set1_epi32(0x7f800000), all = _mm256_set1_epi32(-1);
  const __m256 neg_inf = _mm256_set1_ps(-__builtin_inff());
  __m256 m0 = neg_inf, m1 = neg_inf;
  __m256i f = _mm256_setzero_si256();
  auto flag = [&](__m256 x, __m256i live) {
    const __m256i e = _mm256_and_si256(_mm256_castps_si256(x), expo);
    f = _mm256_or_si256(f, _mm256_and_si256(live, _mm256_cmpeq_epi32(e, expo)));
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(s + i), b = _mm256_loadu_ps(s + i + 8);
    m0 = _mm256_max_ps(a, m0), m1 = _mm256_max_ps(b, m1);
    flag(a, all), flag(b, all);
  }
  for (; i < n; i += 8) {
    const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - i < 8 ? n - i : 8)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 a = _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(s + i, live), _mm256_castsi256_ps(live));
    m0 = _mm256_max_ps(a, m0);
    flag(a, live);
  }
  alignas(32) float lane[16];
  _mm256_store_ps(lane, m0), _mm256_store_ps(lane + 8, m1);
  float m = lane[0];
  for (int l = 1; l < 16; ++l) m = m < lane[l] ? lane[l] : m;
  *bad |= _mm256_movemask_epi8(f) != 0;
  return m;
}

float ExpSubSum(float* s, int64_t n, float m) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(s + i), vm));
    _mm256_storeu_ps(s + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {  // tail through a padded register (padding lanes are -inf: exp gives 0)
    alignas(32) float t[8];
    for (int j = 0; j < 8; ++j) t[j] = i + j < n ? s[i + j] : -__builtin_inff();
    const __m256 e = Exp(_mm256_sub_ps(_mm256_load_ps(t), vm));
    _mm256_store_ps(t, e);
    for (int j = 0; i + j < n; ++j) s[i + j] = t[j];
    acc = _mm256_add_ps(acc, e);
  }
  return HSum(acc);
}

// tanh(z) = sign(z) (1 - 2 / (e^{2|z|} + 1)); e^{2|z|} saturates (2|z| clamped at 88), giving 1.
inline __m256 Tanh(__m256 z) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 a = _mm256_andnot_ps(sign, z);
  const __m256 e = Exp(_mm256_min_ps(_mm256_add_ps(a, a), _mm256_set1_ps(88.0f)));
  const __m256 t = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
  return _mm256_or_ps(t, _mm256_and_ps(sign, z));
}

void GeluTanhMul(const float* g, const float* u, int64_t n, float* out) {
  const __m256 c = _mm256_set1_ps(0.7978845608028654f), k = _mm256_set1_ps(0.044715f), half = _mm256_set1_ps(0.5f),
               one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    const __m256 inner = _mm256_mul_ps(c, _mm256_fmadd_ps(_mm256_mul_ps(k, x), _mm256_mul_ps(x, x), x));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, Tanh(inner)));
    if (u) y = _mm256_mul_ps(y, _mm256_loadu_ps(u + i));
    _mm256_storeu_ps(out + i, y);
  }
  for (; i < n; ++i) {
    const float x = g[i];
    const float gelu = 0.5f * x * (1.0f + __builtin_tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    out[i] = u ? gelu * u[i] : gelu;
  }
}

// tanh to a few ulps: Tanh's exp form where |z| >= 0.4; below, where 1 - 2 / (e^{2|z|} + 1) would
// cancel, tanh's odd Taylor series through z^15 (truncation below 1e-8 relative there). NaN takes
// the series (the unordered compare), so it stays NaN.
inline __m256 TanhAccurate(__m256 z) {
  static constexpr float kSeries[7] = {-929569.0f / 638512875, 21844.0f / 6081075, -1382.0f / 155925, 62.0f / 2835,
                                       -17.0f / 315,          2.0f / 15,          -1.0f / 3};
  const __m256 z2 = _mm256_mul_ps(z, z);
  __m256 p = _mm256_set1_ps(kSeries[0]);
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(kSeries[i]));
  const __m256 series = _mm256_fmadd_ps(_mm256_mul_ps(z, z2), p, z);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 small = _mm256_cmp_ps(_mm256_andnot_ps(sign, z), _mm256_set1_ps(0.4f), _CMP_NGE_UQ);
  const __m256 t = _mm256_blendv_ps(Tanh(z), series, small);
  return _mm256_or_ps(_mm256_andnot_ps(sign, t), _mm256_and_ps(sign, z));  // odd: -0 gives -0
}

// cap tanh(x / cap), dividing as the reference does; the tail through a padded register, so an
// element's result does not depend on where n ends.
void SoftCap(float* x, int64_t n, float cap) {
  const __m256 c = _mm256_set1_ps(cap);
  auto one = [&](__m256 v) { return _mm256_mul_ps(c, TanhAccurate(_mm256_div_ps(v, c))); };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, one(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float t[8] = {};
    for (int j = 0; i + j < n; ++j) t[j] = x[i + j];
    _mm256_store_ps(t, one(_mm256_load_ps(t)));
    for (int j = 0; i + j < n; ++j) x[i + j] = t[j];
  }
}

// In-register 8x8 transpose: r[i] holds row i on entry and column i on return.
inline void Transpose8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// 16 weight rows x 8 k at a time: widen, transpose two 8x8 blocks, store 8 packed k rows.
template <typename T, __m256 (*Load)(const T*), float (*Scalar)(T)>
void PackPanel(const T* src, int64_t st, int rows, int64_t kc, float* dst) {
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    __m256 lo[8], hi[8];
    for (int j = 0; j < 8; ++j) lo[j] = j < rows ? Load(src + j * st + k) : _mm256_setzero_ps();
    for (int j = 0; j < 8; ++j) hi[j] = j + 8 < rows ? Load(src + (j + 8) * st + k) : _mm256_setzero_ps();
    Transpose8(lo);
    Transpose8(hi);
    for (int i = 0; i < 8; ++i) {
      _mm256_store_ps(dst + (k + i) * 16, lo[i]);
      _mm256_store_ps(dst + (k + i) * 16 + 8, hi[i]);
    }
  }
  for (; k < kc; ++k)
    for (int j = 0; j < 16; ++j) dst[k * 16 + j] = j < rows ? Scalar(src[j * st + k]) : 0.0f;
}

void PackPanel16(DType dtype, const void* src, int64_t st, int rows, int64_t kc, float* dst) {
  if (dtype == DType::kF32) return PackPanel<float, LoadF32, IdF32>(static_cast<const float*>(src), st, rows, kc, dst);
  if (dtype == DType::kBF16) return PackPanel<uint16_t, LoadBf16, Bf16>(static_cast<const uint16_t*>(src), st, rows, kc, dst);
  PackPanel<uint16_t, LoadF16, F16>(static_cast<const uint16_t*>(src), st, rows, kc, dst);
}

#include "ops/bf16_round.inc"

}  // namespace

const SimdKernels* SimdAvx2() {
  static const SimdKernels k{"avx2",
                             Dot<float, LoadF32, IdF32>,
                             Dot<uint16_t, LoadBf16, Bf16>,
                             Dot<uint16_t, LoadF16, F16>,
                             Axpy<float, LoadF32, IdF32>,
                             Axpy<uint16_t, LoadBf16, Bf16>,
                             Axpy<uint16_t, LoadF16, F16>,
                             Scale,
                             DotRows4<float, LoadF32, IdF32>,
                             DotRows4<uint16_t, LoadBf16, Bf16>,
                             DotRows4<uint16_t, LoadF16, F16>,
                             Dot2<float, LoadF32, IdF32>,
                             Dot2<uint16_t, LoadBf16, Bf16>,
                             Dot2<uint16_t, LoadF16, F16>,
                             Axpy4<float, LoadF32, IdF32>,
                             Axpy4<uint16_t, LoadBf16, Bf16>,
                             Axpy4<uint16_t, LoadF16, F16>,
                             GemmTile,
                             GemmTileB,
                             PackRows16,
                             RowMax,
                             ExpSubSum,
                             GeluTanhMul,
                             PackPanel16,
                             SoftCap,
                             RoundBf16Row,
                             WidenBf16Row};
  return &k;
}

}  // namespace tessera::ops
