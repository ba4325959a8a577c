// The quantized dot kernels on AVX2 (vpmaddubsw: unsigned x signed bytes into 16-bit pair sums,
// vpmaddwd into 32 bits). Compiled with AVX2 + FMA + F16C; called only on CPUs with them.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

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

// The pair's scales from sc16: dword j (scales 2j, 2j + 1) to every dword, then each half's own
// spread over its 128 bits; two shuffles, against building them from two scalars.
inline __m256i Dot4ScaledPair(__m256i u, __m256i s, const int8_t*, __m256i sc16, int j) {
  const __m256i spread = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,  //
                                          2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
  const __m256i pair = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(sc16, _mm256_set1_epi32(j)), spread);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), pair);
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

// Sixteen bytes at byte `at` of each of the eight rows, transposed: v[k] holds bytes 4k .. 4k + 3 of
// row r in lane r (two 4x4 dword transposes, one per 128-bit lane). kBytes 8: bytes [at, at + 8) as
// the first two vectors (the last dwords of a run).
template <int kBytes = 16, typename Rows>
[[gnu::always_inline]] inline void Transpose8Rows(const Rows& p, int64_t at, __m256i* v) {
  auto row = [&](int r) { return RowBytes<kBytes>(p(r) + at); };
  __m256i z[4];
  for (int a = 0; a < 4; ++a) z[a] = _mm256_set_m128i(row(a + 4), row(a));  // 128-bit lane L: row a + 4L
  const __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t2 = _mm256_unpacklo_epi32(z[2], z[3]);
  v[0] = _mm256_unpacklo_epi64(t0, t2), v[1] = _mm256_unpackhi_epi64(t0, t2);
  if constexpr (kBytes == 16) {
    const __m256i t1 = _mm256_unpackhi_epi32(z[0], z[1]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
    v[2] = _mm256_unpacklo_epi64(t1, t3), v[3] = _mm256_unpackhi_epi64(t1, t3);
  }
}

// The nibble codes of four transposed dwords: c[m] the low nibbles of v[m], c[m + 4] the high ones.
[[gnu::always_inline]] inline void Nibbles8(const __m256i v[4], __m256i c[8]) {
  const __m256i m4 = _mm256_set1_epi8(15);
  for (int m = 0; m < 4; ++m) c[m] = _mm256_and_si256(v[m], m4), c[m + 4] = _mm256_and_si256(_mm256_srli_epi16(v[m], 4), m4);
}
// The 32 4-bit codes of the eight rows' blocks whose 16 qs bytes are at byte `at` (Q4_0, Q5_0):
// c[m] holds values 4m .. 4m + 3 (m < 4: low nibbles of qs bytes 4m .., m >= 4: high nibbles of qs
// bytes 4(m - 4) ..), row r in lane r.
template <typename Rows>
[[gnu::always_inline]] inline void Codes8(const Rows& p, int64_t at, __m256i c[8]) {
  __m256i v[4];
  Transpose8Rows(p, at, v);
  Nibbles8(v, c);
}

// The eight rows' f16 values at byte `at` (a block's scale), in f32.
template <typename Rows>
inline __m256 Scales8(const Rows& p, int64_t at) {
  auto d = [&](int r) {
    uint16_t h;
    std::memcpy(&h, p(r) + at, 2);
    return static_cast<int>(h);
  };
  __m128i h = _mm_cvtsi32_si128(d(0));
  h = _mm_insert_epi16(h, d(1), 1), h = _mm_insert_epi16(h, d(2), 2), h = _mm_insert_epi16(h, d(3), 3);
  h = _mm_insert_epi16(h, d(4), 4), h = _mm_insert_epi16(h, d(5), 5), h = _mm_insert_epi16(h, d(6), 6);
  return _mm256_cvtph_ps(_mm_insert_epi16(h, d(7), 7));
}

// pshufb mask bytes: each dword's first byte index in all four of its bytes (a pshufb mask of
// 0x8x zeroes its byte).
inline __m256i DwordStarts() {
  return _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404, 0x08080808, 0x0c0c0c0c);
}

// Adds 16 to the codes (c as Codes8 gives them) whose fifth bit is set: qh lane r is row r's qh, and
// the fifth bits of c[m] are its bits 4m .. 4m + 3. qh byte k goes to all four bytes of each dword,
// then bit i of it (i: byte in dword, or 4 + i) to 16.
[[gnu::always_inline]] inline void FifthBits8(__m256i qh, __m256i c[8]) {
  const __m256i bit[2] = {_mm256_set1_epi32(0x08040201), _mm256_set1_epi32(static_cast<int>(0x80402010u))};
  for (int k = 0; k < 4; ++k) {
    const __m256i b = _mm256_shuffle_epi8(qh, _mm256_add_epi8(_mm256_set1_epi8(static_cast<char>(k)), DwordStarts()));
    for (int n = 0; n < 2; ++n) {
      const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit[n]), bit[n]);
      c[2 * k + n] = _mm256_or_si256(c[2 * k + n], _mm256_and_si256(set, _mm256_set1_epi8(16)));
    }
  }
}

// Eight f16 values, one in the low half of each dword, in f32.
inline __m256 Halves8(__m256i v) {
  return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0xd8)));
}

// The eight-row lanes for the runs of quant_runs_x86.inc (its header says what each member does).
struct L8 {
  using V = __m256i;
  using F = __m256;
  template <typename Rows>
  [[gnu::always_inline]] static void Transpose(const Rows& p, int64_t off, V* v) { Transpose8Rows(p, off, v); }
  template <typename Rows>
  [[gnu::always_inline]] static void TransposeHalf(const Rows& p, int64_t off, V* v) { Transpose8Rows<8>(p, off, v); }
  template <bool kHigh>
  [[gnu::always_inline]] static F Halves(V v) {
    return Halves8(kHigh ? _mm256_srli_epi32(v, 16) : _mm256_and_si256(v, _mm256_set1_epi32(0xffff)));
  }
  [[gnu::always_inline]] static V TwoBytesOn(V a, V b) {
    return _mm256_or_si256(_mm256_srli_epi32(a, 16), _mm256_slli_epi32(b, 16));
  }
  [[gnu::always_inline]] static void Nibbles(const V* d, V* c) { Nibbles8(d, c); }
  [[gnu::always_inline]] static void FifthBits(V qh, V* c) { FifthBits8(qh, c); }
};

#include "ops/quant_runs_x86.inc"

inline __m256i Bcast32(const int8_t* q) {
  int32_t v;
  std::memcpy(&v, q, 4);
  return _mm256_set1_epi32(v);
}

// The eight-row kernels (Q4_0, Q5_0, Q4_1, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; below) as types, so that one
// driver (Rows8T) serves them all. Forced inline into Rows8T (one function per kernel and token
// count): GCC kept the K-quant ones out of line, a call per group, their prefetch then outside the
// functions tests/prefetch_emitted.sh reads.
// The 32-value 4-bit and 5-bit formats: with an offset (Q4_0, Q5_0), or with a minimum (kMin: Q4_1,
// Q5_1, x = d q + m: the block's term gains m (d_x sum of x), one FMA per token).
template <bool kMin>
struct Group4Bit {
  template <int T, typename Rows>
  [[gnu::always_inline]] static void Run(const Rows& p, const char* x, int64_t x_stride, int64_t nb, float* out,
                                         int64_t out_stride, int keep, const uint8_t* next = nullptr,
                                         int64_t next_bytes = 0);
};
template <bool kMin>
struct Group5Bit {
  template <int T, typename Rows>
  [[gnu::always_inline]] static void Run(const Rows& p, const char* x, int64_t x_stride, int64_t nb, float* out,
                                         int64_t out_stride, int keep, const uint8_t* next = nullptr,
                                         int64_t next_bytes = 0);
};
struct GroupQ4_0 : Group4Bit<false> {};
struct GroupQ4_1 : Group4Bit<true> {};
struct GroupQ5_0 : Group5Bit<false> {};
struct GroupQ5_1 : Group5Bit<true> {};
struct GroupQ8_0 {
  template <int T, typename Rows>
  [[gnu::always_inline]] static void Run(const Rows& p, const char* x, int64_t x_stride, int64_t nb, float* out,
                                         int64_t out_stride, int keep, const uint8_t* next = nullptr,
                                         int64_t next_bytes = 0);
};
// Q4_K and Q5_K (kFifth: each code's fifth bit from qh) share one group.
template <bool kFifth>
struct GroupK45 {
  template <int T, typename Rows>
  [[gnu::always_inline]] static void Run(const Rows& p, const char* x, int64_t x_stride, int64_t nb, float* out,
                                         int64_t out_stride, int keep, const uint8_t* next = nullptr,
                                         int64_t next_bytes = 0);
};
struct GroupQ4_K : GroupK45<false> {};
struct GroupQ5_K : GroupK45<true> {};

struct GroupQ6_K {
  template <int T, typename Rows>
  [[gnu::always_inline]] static void Run(const Rows& p, const char* x, int64_t x_stride, int64_t nb, float* out,
                                         int64_t out_stride, int keep, const uint8_t* next = nullptr,
                                         int64_t next_bytes = 0);
};

// Block b's slice of the next group's rows (`slice` bytes per block), into L2; none when next is null.
[[gnu::always_inline]] inline void PrefetchSlice(const uint8_t* next, int64_t b, int64_t slice) {
  if (next)
    for (int64_t l = b * slice; l < (b + 1) * slice; l += 64) _mm_prefetch(reinterpret_cast<const char*>(next + l), _MM_HINT_T1);
}

// Token i's eight row outputs (the first `keep` of them) at out + i * out_stride.
template <int T>
inline void StoreLanes(const __m256 acc[T], float* out, int64_t out_stride, int keep) {
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

// The block loop of every group: the accumulators, each block's slice of the next group's
// prefetch, the stores. block(off, xb0, acc) adds block b (byte off of each row; token i's
// activation block, of type X, at xb0 + i * x_stride) to every token's accumulator.
template <int T, typename X, typename Block>
[[gnu::always_inline]] inline void EachBlock(int64_t block_bytes, const char* x, int64_t nb, float* out,
                                             int64_t out_stride, int keep, const uint8_t* next, int64_t next_bytes,
                                             Block& block) {
  const int64_t slice = (next_bytes + nb - 1) / nb;
  __m256 acc[T];
  for (int i = 0; i < T; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    PrefetchSlice(next, b, slice);
    block(b * block_bytes, x + b * int64_t(sizeof(X)), acc);
  }
  StoreLanes<T>(acc, out, out_stride, keep);
}

// The formats that take runs here (quant_runs_x86.inc): those whose blocks start on a dword, Q4_1
// and Q5_1. With sixteen vector registers the other formats' runs (more dwords, and half their
// blocks moved two bytes on) spilled and ran slower than their block-at-a-time path
// (bench/results/quant_kernels.md, "Gather-free passes").
template <typename W>
constexpr bool kRuns8 = std::is_same_v<W, BlockQ4_1> || std::is_same_v<W, BlockQ5_1>;

// EachBlock for the 32-value formats (block type W): with kRuns8<W>, runs of Run<L8, W>::kBlocks
// blocks while whole runs are left, then block by block. unpack(off, &dw, &mw, c) gives one block's
// scales and codes on its own, tokens(xb0, dw, mw, c, acc) adds a block to every token's
// accumulator; each block's tokens get the same values from either path.
template <int T, typename W, typename Rows, typename Unpack, typename Tokens>
[[gnu::always_inline]] inline void EachBlock32(const Rows& p, const char* x, int64_t nb, float* out, int64_t out_stride,
                                               int keep, const uint8_t* next, int64_t next_bytes, Unpack& unpack,
                                               Tokens& tokens) {
  const int64_t slice = (next_bytes + nb - 1) / nb;
  __m256 acc[T];
  for (int i = 0; i < T; ++i) acc[i] = _mm256_setzero_ps();
  auto xb = [&](int64_t b) { return x + b * int64_t(sizeof(ActBlock32)); };
  constexpr int kRun = kRuns8<W> ? Run<L8, W>::kBlocks : 0;
  int64_t b = 0;
  if constexpr (kRun > 0)
    for (; b + kRun <= nb; b += kRun)
      RunBlocks<L8, W>(p, b * int64_t(sizeof(W)), [&](int j, __m256 dw, __m256 mw, const __m256i* c)
                                                      __attribute__((always_inline)) {
        PrefetchSlice(next, b + j, slice);
        tokens(xb(b + j), dw, mw, c, acc);
      });
  for (; b < nb; ++b) {
    PrefetchSlice(next, b, slice);
    __m256 dw, mw = _mm256_setzero_ps();
    __m256i c[8];
    unpack(b * int64_t(sizeof(W)), &dw, &mw, c);
    tokens(xb(b), dw, mw, c, acc);
  }
  StoreLanes<T>(acc, out, out_stride, keep);
}

// Eight rows' 32 codes (c as Codes8 gives them) against a token's 32 activations at q: two 16-bit
// chains of four vpmaddubsw (values 0 .. 15 and 16 .. 31; half the latency of one chain).
[[gnu::always_inline]] inline void Chains32(const __m256i c[8], const int8_t* q, __m256i& s0, __m256i& s1) {
  s0 = _mm256_maddubs_epi16(c[0], Bcast32(q)), s1 = _mm256_maddubs_epi16(c[4], Bcast32(q + 16));
  for (int k = 1; k < 4; ++k) {
    s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(c[k], Bcast32(q + 4 * k)));
    s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(c[k + 4], Bcast32(q + 16 + 4 * k)));
  }
}

// The two chains times the eight rows' scales (16-bit, in both halves of each lane; ones for the
// 32-value types), in 32 bits. 4-bit codes (Q4_0, Q4_K): the chains joined exactly in 16 bits, one
// vpmaddwd. 5-bit codes (Q5_0, Q5_K) reach 31, so only four byte-pair sums fit a 16-bit sum
// (4 * 2 * 31 * 127 = 31496): each chain its own vpmaddwd.
[[gnu::always_inline]] inline __m256i Sum4Bit(const __m256i c[8], const int8_t* q, __m256i scale) {
  __m256i s0, s1;
  Chains32(c, q, s0, s1);
  return _mm256_madd_epi16(_mm256_add_epi16(s0, s1), scale);
}
[[gnu::always_inline]] inline __m256i Sum5Bit(const __m256i c[8], const int8_t* q, __m256i scale) {
  __m256i s0, s1;
  Chains32(c, q, s0, s1);
  return _mm256_add_epi32(_mm256_madd_epi16(s0, scale), _mm256_madd_epi16(s1, scale));
}

// Token xb's term of a block with integer sum s (offset already taken off) for the eight rows of
// scales dw and, with kMin, minimums mw.
template <bool kMin>
[[gnu::always_inline]] inline __m256 AddBlock32(__m256 dw, __m256 mw, __m256i s, const ActBlock32& xb, __m256 acc) {
  acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xb.d)), _mm256_cvtepi32_ps(s), acc);
  if constexpr (kMin) acc = _mm256_fmadd_ps(mw, _mm256_set1_ps(xb.d * static_cast<float>(xb.sum)), acc);
  return acc;
}

// Eight rows (p: FullRows, or SomeRows for the last rows of a call, fewer than eight: lanes past
// them repeat row 0 and are never stored), T tokens (token i's activation blocks at
// x + i * x_stride); the first `keep` outputs of each token stored. `next` (or null): the next
// group's rows, next_bytes from there, prefetched a slice per block into L2, as the AVX-512
// sixteen-row kernel does and for its reason.
template <bool kMin>
template <int T, typename Rows>
[[gnu::always_inline]] inline void Group4Bit<kMin>::Run(const Rows& p, const char* x, int64_t x_stride, int64_t nb,
                                                        float* out, int64_t out_stride, int keep,
                                                        const uint8_t* next, int64_t next_bytes) {
  using B = std::conditional_t<kMin, BlockQ4_1, BlockQ4_0>;
  auto unpack = [&](int64_t off, __m256* dw, __m256* mw, __m256i* c) __attribute__((always_inline)) {
    *dw = Scales8(p, off + offsetof(B, d));
    if constexpr (kMin) *mw = Scales8(p, off + offsetof(BlockQ4_1, m));
    Codes8(p, off + offsetof(B, qs), c);
  };
  auto tokens = [&](const char* xb0, __m256 dw, __m256 mw, const __m256i* c, __m256* acc) __attribute__((always_inline)) {
    for (int i = 0; i < T; ++i) {
      const ActBlock32& xb = *reinterpret_cast<const ActBlock32*>(xb0 + i * x_stride);
      __m256i s = Sum4Bit(c, xb.q, _mm256_set1_epi16(1));
      if constexpr (!kMin) s = _mm256_add_epi32(s, _mm256_set1_epi32(-8 * xb.sum));
      acc[i] = AddBlock32<kMin>(dw, mw, s, xb, acc[i]);
    }
  };
  EachBlock32<T, B>(p, x, nb, out, out_stride, keep, next, next_bytes, unpack, tokens);
}

// Q5_0 eight rows at a time, as Q4_0 above, each code's fifth bit (qh bit j for value j) set into
// bit 4 of its byte; the sums as Sum5Bit says.

// The eight rows' block `off`: its d in f32 (the return), with kMin (Q5_1) its m in *mw, and its 32
// codes, c[m] as Codes8 gives them (values 4m .. 4m + 3, so the fifth bits of c[m] are qh bits
// 4m .. 4m + 3).
template <bool kMin, typename Rows>
[[gnu::always_inline]] inline __m256 LoadBlockQ5x8(const Rows& p, int64_t off, __m256i c[8], __m256* mw) {
  // Q5_0: h[0] lane r = d | qh bytes 0, 1 << 16, h[1] = qh bytes 2, 3 | the first qs bytes;
  // Q5_1: h[0] = d | m << 16, h[1] = qh.
  __m256i h[4];
  Transpose8Rows(p, off, h);
  const __m256i qh = kMin ? h[1] : _mm256_or_si256(_mm256_srli_epi32(h[0], 16), _mm256_slli_epi32(h[1], 16));
  const __m256i d = _mm256_and_si256(h[0], _mm256_set1_epi32(0xffff));
  if constexpr (kMin) *mw = Halves8(_mm256_srli_epi32(h[0], 16));
  Codes8(p, off + (kMin ? offsetof(BlockQ5_1, qs) : offsetof(BlockQ5_0, qs)), c);
  FifthBits8(qh, c);
  return Halves8(d);
}

// Eight rows, T tokens, as Q4_0's above, for Q5_0 and Q5_1.
template <bool kMin>
template <int T, typename Rows>
[[gnu::always_inline]] inline void Group5Bit<kMin>::Run(const Rows& p, const char* x, int64_t x_stride, int64_t nb,
                                                        float* out, int64_t out_stride, int keep,
                                                        const uint8_t* next, int64_t next_bytes) {
  using B = std::conditional_t<kMin, BlockQ5_1, BlockQ5_0>;
  auto unpack = [&](int64_t off, __m256* dw, __m256* mw, __m256i* c) __attribute__((always_inline)) {
    *dw = LoadBlockQ5x8<kMin>(p, off, c, mw);
  };
  auto tokens = [&](const char* xb0, __m256 dw, __m256 mw, const __m256i* c, __m256* acc) __attribute__((always_inline)) {
    for (int i = 0; i < T; ++i) {
      const ActBlock32& xb = *reinterpret_cast<const ActBlock32*>(xb0 + i * x_stride);
      __m256i s = Sum5Bit(c, xb.q, _mm256_set1_epi16(1));
      if constexpr (!kMin) s = _mm256_add_epi32(s, _mm256_set1_epi32(-16 * xb.sum));
      acc[i] = AddBlock32<kMin>(dw, mw, s, xb, acc[i]);
    }
  };
  EachBlock32<T, B>(p, x, nb, out, out_stride, keep, next, next_bytes, unpack, tokens);
}

// Q8_0 eight rows at a time, as Q4_0 above, its codes signed bytes: vpmaddubsw takes |q| as the
// unsigned operand and q's sign moves onto the token's activations (vpsignb), as in the one-row
// kernel. A pair sum then reaches 2 * 128 * 127, so no two fit a 16-bit sum: each vpmaddubsw goes
// to 32 bits by its own vpmaddwd. Only the signed codes stay in registers across the tokens (eight
// vectors; their absolute values too would fill all sixteen): |q| is one instruction per token.
template <int T, typename Rows>
[[gnu::always_inline]] inline void GroupQ8_0::Run(const Rows& p, const char* x, int64_t x_stride, int64_t nb,
                                                  float* out, int64_t out_stride, int keep, const uint8_t* next,
                                                  int64_t next_bytes) {
  auto unpack = [&](int64_t off, __m256* dw, __m256*, __m256i* c) __attribute__((always_inline)) {
    *dw = Scales8(p, off + offsetof(BlockQ8_0, d));
    Transpose8Rows(p, off + offsetof(BlockQ8_0, qs), c);  // c[m]: values 4m .. 4m + 3, as Codes8 orders them
    Transpose8Rows(p, off + offsetof(BlockQ8_0, qs) + 16, c + 4);
  };
  auto tokens = [&](const char* xb0, __m256 dw, __m256, const __m256i* c, __m256* acc) __attribute__((always_inline)) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int i = 0; i < T; ++i) {
      const ActBlock32& xb = *reinterpret_cast<const ActBlock32*>(xb0 + i * x_stride);
      auto product = [&](int m) {
        const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(c[m]), _mm256_sign_epi8(Bcast32(xb.q + 4 * m), c[m]));
        return _mm256_madd_epi16(pairs, ones);
      };
      __m256i s0 = product(0), s1 = product(1);  // two chains, half the latency of one
      for (int m = 2; m < 8; m += 2) s0 = _mm256_add_epi32(s0, product(m)), s1 = _mm256_add_epi32(s1, product(m + 1));
      acc[i] = AddBlock32<false>(dw, dw, _mm256_add_epi32(s0, s1), xb, acc[i]);
    }
  };
  EachBlock32<T, BlockQ8_0>(p, x, nb, out, out_stride, keep, next, next_bytes, unpack, tokens);
}

// Q4_K eight rows at a time, as Q4_0 above: a chunk of 64 values of the eight rows is transposed
// once (vector m: values 4m .. 4m + 3 of a 32-value sub-block, row r in lane r), so a token's
// sub-block is eight vpmaddubsw against its activation dwords broadcast, summed in 16 bits (exact
// by the same bound: 4-bit codes), then one vpmaddwd by the eight rows' 6-bit scales of that
// sub-block (Q5_K, whose group this is too: GroupK45::Run below). The minimums are one vpmaddwd
// per two sub-blocks against the token's sub-block sums. Each lane's integer sums are the one-row
// kernel's; the f32 steps per lane are the same whatever the rows beside it or the number of
// tokens, so dot_rows and dot_rows_tokens agree bit for bit.

// The eight rows' per-block values: sc[j] lane r = (scale j of row r) in both 16-bit halves;
// mn[q] lane r = (minimum 2q, minimum 2q + 1) of row r; d and dmin in f32.
struct BlockK8 {
  __m256i sc[8], mn[4];
  __m256 d, dmin;
};

// pshufb mask: in each dword, byte b0 of the source dword into byte 0, b1 into byte 2, zeros between
// (high: into bytes 1 and 3, zeros below them, for a sign-extending shift right by 8).
inline __m256i PickBytes(int b0, int b1, bool high = false) {
  const int lo = b0 | 0x80 << 8 | b1 << 16 | 0x80 << 24, hi = 0x80 | b0 << 8 | 0x80 << 16 | b1 << 24;
  return _mm256_add_epi8(_mm256_set1_epi32(high ? hi : lo), DwordStarts());
}

// The 16 header bytes of each row's block (d, dmin, the 12 packed scale bytes) transposed, row r in
// lane r, then the 6-bit scales and minimums unpacked for all eight rows at once, as ggml packs them.
template <typename Rows>
[[gnu::always_inline]] inline void LoadBlockK8(const Rows& p, int64_t off, BlockK8& k) {
  __m256i v[4];
  Transpose8Rows(p, off, v);
  const __m256i dd = v[0];  // lane r: d | dmin << 16
  const __m256i u0 = v[1], u1 = v[2], u2 = v[3];
  const __m256i h = _mm256_permute4x64_epi64(
      _mm256_packus_epi32(_mm256_and_si256(dd, _mm256_set1_epi32(0xffff)), _mm256_srli_epi32(dd, 16)), 0xd8);
  k.d = _mm256_cvtph_ps(_mm256_castsi256_si128(h)), k.dmin = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  const __m256i m6 = _mm256_set1_epi8(0x3f), m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
  auto top2 = [&](__m256i u) { return _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u, 6), m2), 4); };
  const __m256i s0 = _mm256_and_si256(u0, m6), s1 = _mm256_or_si256(_mm256_and_si256(u2, m4), top2(u0));
  const __m256i n0 = _mm256_and_si256(u1, m6), n1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m4), top2(u1));
  for (int j = 0; j < 8; ++j) k.sc[j] = _mm256_shuffle_epi8(j < 4 ? s0 : s1, PickBytes(j % 4, j % 4));
  for (int q = 0; q < 4; ++q) k.mn[q] = _mm256_shuffle_epi8(q < 2 ? n0 : n1, PickBytes(2 * (q % 2), 2 * (q % 2) + 1));
}

// Chunk c (values 64c .. 64c + 63) of the eight rows' blocks whose qs bytes are at byte `at`,
// transposed: v[m] = bytes 4m .. 4m + 3 of each row's 32 (low nibbles: values 64c + 4m ..,
// sub-block 2c; high nibbles: values 64c + 32 + 4m .., sub-block 2c + 1), row r in lane r.
template <typename Rows>
[[gnu::always_inline]] inline void ChunkK8(const Rows& p, int64_t at, int c, __m256i v[8]) {
  for (int h = 0; h < 2; ++h) Transpose8Rows(p, at + 32 * c + 16 * h, v + 4 * h);
}

// The minimums' integer sums of the eight rows against a token's block: sum_j mn_j (x sum of j).
[[gnu::always_inline]] inline __m256i MinsK8(const BlockK8& k, const ActBlock256& xb) {
  const __m256i xs = _mm256_madd_epi16(Load32(xb.bsums), _mm256_set1_epi16(1));  // lane j: sub-block j's sum
  const __m256i p = _mm256_packs_epi32(xs, xs);  // 16-bit, exact: |sum| <= 32 * 127; dwords 0, 1, 4, 5 the pairs
  __m256i s = _mm256_setzero_si256();
  for (int q = 0; q < 4; ++q)
    s = _mm256_add_epi32(s, _mm256_madd_epi16(k.mn[q], _mm256_permutevar8x32_epi32(p, _mm256_set1_epi32(q / 2 * 4 + q % 2))));
  return s;
}

// Eight rows, T tokens: as Q4_0's above (rows, stores, the next group's prefetch), for Q4_K and,
// with the fifth bits (bit j of qh byte l: value l of sub-block j) and Sum5Bit, for Q5_K. Q5_K's
// header starts as Q4_K's (d, dmin, the 12 scale bytes), so LoadBlockK8 serves both.
template <bool kFifth>
template <int T, typename Rows>
[[gnu::always_inline]] inline void GroupK45<kFifth>::Run(const Rows& p, const char* x, int64_t x_stride, int64_t nb,
                                                         float* out, int64_t out_stride, int keep,
                                                         const uint8_t* next, int64_t next_bytes) {
  using Block = std::conditional_t<kFifth, BlockQ5_K, BlockQ4_K>;
  auto block = [&](int64_t off, const char* xb0, __m256* acc) __attribute__((always_inline)) {
    BlockK8 k;
    LoadBlockK8(p, off, k);
    __m256i isum[T];
    for (int i = 0; i < T; ++i) isum[i] = _mm256_setzero_si256();
    __m256i hb[8];  // Q5_K: hb[m] = qh bytes 4m .. 4m + 3 (values 4m .. of every sub-block), row r in lane r
    if constexpr (kFifth)
      for (int h = 0; h < 2; ++h) Transpose8Rows(p, off + offsetof(BlockQ5_K, qh) + 16 * h, hb + 4 * h);
    // Sub-block by sub-block, all tokens each: its eight code vectors stay in registers for them.
    const __m256i m4 = _mm256_set1_epi8(15), m16 = _mm256_set1_epi8(16);
    for (int c = 0; c < 4; ++c) {
      __m256i v[8];
      ChunkK8(p, off + offsetof(Block, qs), c, v);
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * c + h;  // the sub-block
        __m256i codes[8];
        for (int m = 0; m < 8; ++m) {
          codes[m] = _mm256_and_si256(h ? _mm256_srli_epi16(v[m], 4) : v[m], m4);
          if constexpr (kFifth) {  // bit j to bit 4 (16-bit shifts by at most 4: the mask drops other bytes' bits)
            const __m256i top = j < 4 ? _mm256_slli_epi16(hb[m], 4 - j) : _mm256_srli_epi16(hb[m], j - 4);
            codes[m] = _mm256_or_si256(codes[m], _mm256_and_si256(top, m16));
          }
        }
        for (int i = 0; i < T; ++i) {
          const int8_t* q = reinterpret_cast<const ActBlock256*>(xb0 + i * x_stride)->q + 32 * j;
          isum[i] = _mm256_add_epi32(isum[i], kFifth ? Sum5Bit(codes, q, k.sc[j]) : Sum4Bit(codes, q, k.sc[j]));
        }
      }
    }
    for (int i = 0; i < T; ++i) {
      const ActBlock256& xb = *reinterpret_cast<const ActBlock256*>(xb0 + i * x_stride);
      const __m256 xd = _mm256_set1_ps(xb.d);
      acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(k.d, xd), _mm256_cvtepi32_ps(isum[i]), acc[i]);
      acc[i] = _mm256_fnmadd_ps(_mm256_mul_ps(k.dmin, xd), _mm256_cvtepi32_ps(MinsK8(k, xb)), acc[i]);
    }
  };
  EachBlock<T, ActBlock256>(sizeof(Block), x, nb, out, out_stride, keep, next, next_bytes, block);
}

// Q6_K eight rows at a time. Codes have six bits (0 .. 63, offset 32), so a vpmaddubsw pair sum
// reaches 2 * 63 * 127 and only two of them fit a 16-bit sum: a 16-value sub-block (one int8 scale)
// is four vpmaddubsw, two 16-bit sums, two vpmaddwd by the eight rows' scales. The offset,
// 32 sum_s sc_s (x sum of sub-block s), is one vpmaddwd per two sub-blocks against the token's sums.
// The block goes in groups (h, g): of half h's four 32-value quarters, values 16g .. 16g + 15 of
// each, i.e. ql bytes 64h + 16g .. (quarters 0, 2: low, high nibbles), 64h + 32 + 16g .. (quarters
// 1, 3) and qh bytes 32h + 16g .. (bits 2k, 2k + 1: quarter k) transposed, row r in lane r; quarter
// k's values there are sub-block 8h + 2k + g. Lanes as in the kernels above; dot_rows (RowLaneQ6K
// below) repeats a lane's f32 steps, so it and dot_rows_tokens agree bit for bit.

// The eight rows' per-block values: sc[s] lane r = scale s of row r in both 16-bit halves, pair[q]
// lane r = (scale 2q, scale 2q + 1) of row r, d in f32.
struct BlockQ6K8 {
  __m256i sc[16], pair[8];
  __m256 d;
};

template <typename Rows>
[[gnu::always_inline]] inline void LoadBlockQ6K8(const Rows& p, int64_t off, BlockQ6K8& k) {
  __m256i v[4];  // v[m] lane r: scales 4m .. 4m + 3 of row r
  Transpose8Rows(p, off + offsetof(BlockQ6_K, scales), v);
  for (int s = 0; s < 16; ++s) k.sc[s] = _mm256_srai_epi16(_mm256_shuffle_epi8(v[s / 4], PickBytes(s % 4, s % 4, true)), 8);
  for (int q = 0; q < 8; ++q) k.pair[q] = _mm256_blend_epi16(k.sc[2 * q], k.sc[2 * q + 1], 0xaa);  // odd halves from 2q + 1
  k.d = Scales8(p, off + offsetof(BlockQ6_K, d));
}

// Quarter k of group (h, g), from its transposed ql (lo: quarters 0, 2; hi: 1, 3) and qh vectors.
[[gnu::always_inline]] inline void QuarterQ6K8(const __m256i lo[4], const __m256i hi[4], const __m256i qh[4], int k,
                                               __m256i c[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
  for (int m = 0; m < 4; ++m) {
    const __m256i l = k & 1 ? hi[m] : lo[m];
    const __m256i low = _mm256_and_si256(k < 2 ? l : _mm256_srli_epi16(l, 4), m4);
    const __m256i top = k == 2 ? qh[m] : k < 2 ? _mm256_slli_epi16(qh[m], 4 - 2 * k) : _mm256_srli_epi16(qh[m], 2);
    c[m] = _mm256_or_si256(low, _mm256_and_si256(top, m30));
  }
}

// One 16-value sub-block of the eight rows against a token's activations at q: the scaled sums.
[[gnu::always_inline]] inline __m256i SubBlockQ6K8(const __m256i c[4], const int8_t* q, __m256i scale) {
  const __m256i s0 = _mm256_add_epi16(_mm256_maddubs_epi16(c[0], Bcast32(q)), _mm256_maddubs_epi16(c[1], Bcast32(q + 4)));
  const __m256i s1 = _mm256_add_epi16(_mm256_maddubs_epi16(c[2], Bcast32(q + 8)), _mm256_maddubs_epi16(c[3], Bcast32(q + 12)));
  return _mm256_add_epi32(_mm256_madd_epi16(s0, scale), _mm256_madd_epi16(s1, scale));
}

// The offset's integer sums of the eight rows against a token's block: sum_s sc_s (x sum of s).
[[gnu::always_inline]] inline __m256i OffsetQ6K8(const BlockQ6K8& k, const ActBlock256& xb) {
  const __m256i bs = Load32(xb.bsums);  // dword q: the sums of sub-blocks 2q, 2q + 1
  __m256i s = _mm256_setzero_si256();
  for (int q = 0; q < 8; ++q) s = _mm256_add_epi32(s, _mm256_madd_epi16(k.pair[q], _mm256_permutevar8x32_epi32(bs, _mm256_set1_epi32(q))));
  return s;
}

// Eight rows, T tokens, as Q4_K's above, for Q6_K.
template <int T, typename Rows>
[[gnu::always_inline]] inline void GroupQ6_K::Run(const Rows& p, const char* x, int64_t x_stride, int64_t nb,
                                                  float* out, int64_t out_stride, int keep, const uint8_t* next,
                                                  int64_t next_bytes) {
  auto block = [&](int64_t off, const char* xb0, __m256* acc) __attribute__((always_inline)) {
    BlockQ6K8 k;
    LoadBlockQ6K8(p, off, k);
    __m256i isum[T];
    for (int i = 0; i < T; ++i) isum[i] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h)
      for (int g = 0; g < 2; ++g) {
        __m256i lo[4], hi[4], qh[4];
        Transpose8Rows(p, off + offsetof(BlockQ6_K, ql) + 64 * h + 16 * g, lo);
        Transpose8Rows(p, off + offsetof(BlockQ6_K, ql) + 64 * h + 32 + 16 * g, hi);
        Transpose8Rows(p, off + offsetof(BlockQ6_K, qh) + 32 * h + 16 * g, qh);
        for (int kq = 0; kq < 4; ++kq) {
          __m256i c[4];
          QuarterQ6K8(lo, hi, qh, kq, c);
          const int at = 128 * h + 32 * kq + 16 * g;  // the sub-block's first value
          for (int i = 0; i < T; ++i) {
            const int8_t* q = reinterpret_cast<const ActBlock256*>(xb0 + i * x_stride)->q + at;
            isum[i] = _mm256_add_epi32(isum[i], SubBlockQ6K8(c, q, k.sc[at / 16]));
          }
        }
      }
    for (int i = 0; i < T; ++i) {
      const ActBlock256& xb = *reinterpret_cast<const ActBlock256*>(xb0 + i * x_stride);
      const __m256i s = _mm256_sub_epi32(isum[i], _mm256_slli_epi32(OffsetQ6K8(k, xb), 5));
      acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(k.d, _mm256_set1_ps(xb.d)), _mm256_cvtepi32_ps(s), acc[i]);
    }
  };
  EachBlock<T, ActBlock256>(sizeof(BlockQ6_K), x, nb, out, out_stride, keep, next, next_bytes, block);
}

// Q6_K one row, one token (decode), with the bits of the eight-row kernel's lane: per block the
// integer sum of all 256 products, exact, then that lane's f32 steps. For one token the eight-row
// kernel unpacks as much per row as this and transposes besides: it streams slower
// (bench/results/quant_kernels.md, "AVX2 Q6_K eight rows").
[[gnu::noinline]] float RowLaneQ6K(const void* wp, const void* xp, int64_t nb) {
  const auto* w = static_cast<const BlockQ6_K*>(wp);
  const auto* x = static_cast<const ActBlock256*>(xp);
  __m128 acc = _mm_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    PrefetchAhead(w + b, sizeof(BlockQ6_K));
    const __m256i v = IntQ6K(w[b], x[b]);
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    acc = _mm_fmadd_ss(_mm_set_ss(Half(w[b].d) * x[b].d), _mm_cvtepi32_ps(s), acc);
  }
  return _mm_cvtss_f32(acc);
}

// All rows in groups of eight, each full group prefetching the next one's rows; the last rows, fewer
// than eight, as SomeRows. Out of line, one function per kernel and token count:
// tests/prefetch_emitted.sh finds each by its name.
template <typename G, int T>
[[gnu::noinline]] void Rows8T(const void* wp, int64_t w_stride, int64_t rows, const void* xq, int64_t xq_stride,
                              int64_t nb, float* out, int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(wp);
  const char* x = static_cast<const char*>(xq);
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    const int64_t next_rows = std::min<int64_t>(8, rows - r - 8);
    G::template Run<T>(FullRows{w + r * w_stride, w_stride}, x, xq_stride, nb, out + r, out_stride, 8,
                       next_rows > 0 ? w + (r + 8) * w_stride : nullptr, next_rows * w_stride);
  }
  if (r == rows) return;
  const int left = static_cast<int>(rows - r);
  const uint8_t* p[8];
  for (int i = 0; i < 8; ++i) p[i] = w + (r + (i < left ? i : 0)) * w_stride;
  G::template Run<T>(SomeRows{p}, x, xq_stride, nb, out + r, out_stride, left);
}

// The types with an eight-row group: every block-quantized type.
bool HasGroup8(QuantType t) {
  return t == QuantType::kQ4_0 || t == QuantType::kQ5_0 || t == QuantType::kQ4_1 || t == QuantType::kQ5_1 ||
         t == QuantType::kQ8_0 || t == QuantType::kQ4_K || t == QuantType::kQ5_K || t == QuantType::kQ6_K;
}

void DotRowsTokensAvx2(QuantType t, const void* w, int64_t w_stride, int64_t rows, const void* xq, int64_t xq_stride,
                       int tokens, int64_t nb, float* out, int64_t out_stride);

// Every type's group unpacks once, but Q6_K's one or two tokens run its one-row kernel per token.
bool UnpacksOnceAvx2(QuantType t, int tokens) { return HasGroup8(t) && !(t == QuantType::kQ6_K && tokens <= 2); }

// One token: the group (as one token of dot_rows_tokens, so the two agree by construction), except
// Q6_K's one-row lane kernel (faster there, the same bits).
void DotRowsAvx2(QuantType t, const void* w, int64_t w_stride, int64_t rows, const void* xq, int64_t nb, float* out) {
  if (t == QuantType::kQ6_K) {
    for (int64_t r = 0; r < rows; ++r) out[r] = RowLaneQ6K(static_cast<const char*>(w) + r * w_stride, xq, nb);
    return;
  }
  if (HasGroup8(t)) return DotRowsTokensAvx2(t, w, w_stride, rows, xq, 0, 1, nb, out, 0);
  DotRows(t, w, w_stride, rows, xq, nb, out);
}

// Group G's Rows8T for `tokens` tokens (token counts below kMin are never passed: not instantiated).
template <typename G, int kMin = 1>
void GroupTokens(const void* w, int64_t w_stride, int64_t rows, const void* xq, int64_t xq_stride, int tokens,
                 int64_t nb, float* out, int64_t out_stride) {
  WithTokens<8>(tokens, [&](auto n) {
    if constexpr (decltype(n)::value >= kMin)
      Rows8T<G, decltype(n)::value>(w, w_stride, rows, xq, xq_stride, nb, out, out_stride);
  });
}

// Every type has its codes unpacked once for all tokens (Q6_K's one or two tokens: its one-row lane
// kernel per token, faster there, the same bits).
void DotRowsTokensAvx2(QuantType t, const void* w, int64_t w_stride, int64_t rows, const void* xq, int64_t xq_stride,
                       int tokens, int64_t nb, float* out, int64_t out_stride) {
  switch (t) {
    case QuantType::kQ4_0: return GroupTokens<GroupQ4_0>(w, w_stride, rows, xq, xq_stride, tokens, nb, out, out_stride);
    case QuantType::kQ5_0: return GroupTokens<GroupQ5_0>(w, w_stride, rows, xq, xq_stride, tokens, nb, out, out_stride);
    case QuantType::kQ4_1: return GroupTokens<GroupQ4_1>(w, w_stride, rows, xq, xq_stride, tokens, nb, out, out_stride);
    case QuantType::kQ5_1: return GroupTokens<GroupQ5_1>(w, w_stride, rows, xq, xq_stride, tokens, nb, out, out_stride);
    case QuantType::kQ8_0: return GroupTokens<GroupQ8_0>(w, w_stride, rows, xq, xq_stride, tokens, nb, out, out_stride);
    case QuantType::kQ4_K: return GroupTokens<GroupQ4_K>(w, w_stride, rows, xq, xq_stride, tokens, nb, out, out_stride);
    case QuantType::kQ5_K: return GroupTokens<GroupQ5_K>(w, w_stride, rows, xq, xq_stride, tokens, nb, out, out_stride);
    case QuantType::kQ6_K:
      if (UnpacksOnceAvx2(t, tokens))
        return GroupTokens<GroupQ6_K, 3>(w, w_stride, rows, xq, xq_stride, tokens, nb, out, out_stride);
      break;
    default: break;
  }
  for (int i = 0; i < tokens; ++i)
    DotRowsAvx2(t, w, w_stride, rows, static_cast<const char*>(xq) + i * xq_stride, nb, out + i * out_stride);
}

}  // namespace

const QuantDotKernels& QuantDotAvx2Kernels() {
  static const QuantDotKernels k{"avx2", 8, DotRowsAvx2, DotRowsTokensAvx2, QuantizeAct, Dequantize,
                                 UnpacksOnceAvx2};
  return k;
}

}  // namespace tessera::ops
