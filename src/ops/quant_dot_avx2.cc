// The quantized dot kernels on AVX2 (vpmaddubsw: unsigned x signed bytes into 16-bit pair sums,
// vpmaddwd into 32 bits). Compiled with AVX2 + FMA + F16C; called only on CPUs with them.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ops/quant_act.h"
#include "ops/quant_dot.h"

namespace tessera::ops {
namespace {

inline __m256i Dot4(__m256i u, __m256i s) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)); }
// The scale folds into the 16-to-32-bit step: pair sums times the scale, added in pairs.
inline __m256i Dot4Scaled(__m256i u, __m256i s, int a, int b) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                           _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(b)), _mm_set1_epi16(static_cast<int16_t>(a))));
}

#include "ops/quant_dot_x86.inc"
#include "ops/quant_convert_x86.inc"

// Q4_0 eight rows at a time. AVX2 has no vpdpbusd, and the one-row kernel (DotQ4_0) spends most of
// a block's instructions on unpacking 16 bytes and converting one scale, not on products. Here eight
// rows are transposed into eight vectors (vector k: values 4k .. 4k + 3 of row r in lane r), so a
// token's block is eight vpmaddubsw against its activation dwords broadcast, summed in 16 bits, one
// vpmaddwd, one conversion and one FMA for all eight rows; the unpacking and the scales' conversion
// are shared by the rows, and the codes by every token of the call. The 16-bit sums are exact: a
// pair sum is at most 2 * 15 * 127 in magnitude and eight of them stay below 2^15. Per lane the
// operations are the same whatever the rows beside it or the number of tokens, so each token's
// result is the same in any batch (the multi-token contract of QuantDotKernels).

// The 32 codes of block `off` of the eight rows: c[m] holds values 4m .. 4m + 3 (m < 4: low nibbles
// of qs bytes 4m .., m >= 4: high nibbles of qs bytes 4(m - 4) ..), row r in lane r.
template <typename Rows>
inline void Codes8(const Rows& p, int64_t off, __m256i c[8]) {
  auto row = [&](int r) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p(r) + off + offsetof(BlockQ4_0, qs))); };
  __m256i z[4];
  for (int a = 0; a < 4; ++a) z[a] = _mm256_set_m128i(row(a + 4), row(a));  // 128-bit lane L: row a + 4L
  const __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
  const __m256i v[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2), _mm256_unpacklo_epi64(t1, t3),
                        _mm256_unpackhi_epi64(t1, t3)};
  const __m256i m4 = _mm256_set1_epi8(15);
  for (int m = 0; m < 4; ++m) c[m] = _mm256_and_si256(v[m], m4), c[m + 4] = _mm256_and_si256(_mm256_srli_epi16(v[m], 4), m4);
}

// The eight rows' f16 scales of block `off`, in f32.
template <typename Rows>
inline __m256 Scales8(const Rows& p, int64_t off) {
  auto d = [&](int r) {
    uint16_t h;
    std::memcpy(&h, p(r) + off + offsetof(BlockQ4_0, d), 2);
    return static_cast<int>(h);
  };
  __m128i h = _mm_cvtsi32_si128(d(0));
  h = _mm_insert_epi16(h, d(1), 1), h = _mm_insert_epi16(h, d(2), 2), h = _mm_insert_epi16(h, d(3), 3);
  h = _mm_insert_epi16(h, d(4), 4), h = _mm_insert_epi16(h, d(5), 5), h = _mm_insert_epi16(h, d(6), 6);
  return _mm256_cvtph_ps(_mm_insert_epi16(h, d(7), 7));
}

inline __m256i Bcast32(const int8_t* q) {
  int32_t v;
  std::memcpy(&v, q, 4);
  return _mm256_set1_epi32(v);
}

// Eight rows (p: FullRows, or SomeRows for the last rows of a call, fewer than eight: lanes past
// them repeat row 0 and are never stored), T tokens (token i's activation blocks at
// x + i * x_stride); the first `keep` outputs of each token stored. `next` (or null): the next
// group's rows, next_bytes from there, prefetched a slice per block into L2, as the AVX-512
// sixteen-row kernel does and for its reason.
template <int T, typename Rows>
void Group8(const Rows& p, const char* x, int64_t x_stride, int64_t nb, float* out, int64_t out_stride, int keep,
            const uint8_t* next = nullptr, int64_t next_bytes = 0) {
  const int64_t slice = (next_bytes + nb - 1) / nb;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int i = 0; i < T; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t off = b * int64_t(sizeof(BlockQ4_0));
    if (next)
      for (int64_t l = b * slice; l < (b + 1) * slice; l += 64) _mm_prefetch(reinterpret_cast<const char*>(next + l), _MM_HINT_T1);
    const __m256 dw = Scales8(p, off);
    __m256i c[8];
    Codes8(p, off, c);
    const char* xb0 = x + b * int64_t(sizeof(ActBlock32));
    for (int i = 0; i < T; ++i) {
      const ActBlock32& xb = *reinterpret_cast<const ActBlock32*>(xb0 + i * x_stride);
      // Two 16-bit chains (half the latency of one), joined exactly, then widened once.
      __m256i s0 = _mm256_maddubs_epi16(c[0], Bcast32(xb.q)), s1 = _mm256_maddubs_epi16(c[4], Bcast32(xb.q + 16));
      for (int k = 1; k < 4; ++k) {
        s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(c[k], Bcast32(xb.q + 4 * k)));
        s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(c[k + 4], Bcast32(xb.q + 16 + 4 * k)));
      }
      const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones), _mm256_set1_epi32(-8 * xb.sum));
      acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xb.d)), _mm256_cvtepi32_ps(s), acc[i]);
    }
  }
  for (int i = 0; i < T; ++i) {
    if (keep == 8) {
      _mm256_storeu_ps(out + i * out_stride, acc[i]);
    } else {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[i]);
      std::memcpy(out + i * out_stride, lanes, keep * sizeof(float));
    }
  }
}

// Out of line, one function per token count: tests/prefetch_emitted.sh finds each by its name.
template <int T>
[[gnu::noinline]] void Rows8T(const void* wp, int64_t w_stride, int64_t rows, const void* xq, int64_t xq_stride,
                              int64_t nb, float* out, int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(wp);
  const char* x = static_cast<const char*>(xq);
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    const int64_t next_rows = std::min<int64_t>(8, rows - r - 8);
    Group8<T>(FullRows{w + r * w_stride, w_stride}, x, xq_stride, nb, out + r, out_stride, 8,
              next_rows > 0 ? w + (r + 8) * w_stride : nullptr, next_rows * w_stride);
  }
  if (r == rows) return;
  const int left = static_cast<int>(rows - r);
  const uint8_t* p[8];
  for (int i = 0; i < 8; ++i) p[i] = w + (r + (i < left ? i : 0)) * w_stride;
  Group8<T>(SomeRows{p}, x, xq_stride, nb, out + r, out_stride, left);
}

void DotRowsAvx2(QuantType t, const void* w, int64_t w_stride, int64_t rows, const void* xq, int64_t nb, float* out) {
  if (t == QuantType::kQ4_0) return Rows8T<1>(w, w_stride, rows, xq, 0, nb, out, 0);
  DotRows(t, w, w_stride, rows, xq, nb, out);
}

// Q4_0's codes unpacked once for all tokens; the other types per token (their one-row kernels).
void DotRowsTokensAvx2(QuantType t, const void* w, int64_t w_stride, int64_t rows, const void* xq, int64_t xq_stride,
                       int tokens, int64_t nb, float* out, int64_t out_stride) {
  if (t == QuantType::kQ4_0)
    return WithTokens(tokens, [&](auto n) { Rows8T<decltype(n)::value>(w, w_stride, rows, xq, xq_stride, nb, out, out_stride); });
  for (int i = 0; i < tokens; ++i)
    DotRows(t, w, w_stride, rows, static_cast<const char*>(xq) + i * xq_stride, nb, out + i * out_stride);
}

}  // namespace

const QuantDotKernels& QuantDotAvx2Kernels() {
  static const QuantDotKernels k{"avx2", DotRowsAvx2, DotRowsTokensAvx2, QuantizeAct, Dequantize,
                                 [](QuantType t) { return t == QuantType::kQ4_0; }};
  return k;
}

}  // namespace tessera::ops
