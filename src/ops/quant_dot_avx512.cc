// The quantized dot kernels on AVX-512 VNNI (vpdpbusd: four unsigned x signed byte products added
// into each 32-bit lane in one instruction). Compiled with AVX-512 F/BW/VL/VNNI (+ AVX2, FMA, F16C);
// called only on CPUs with them.
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

inline __m256i Dot4(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
inline __m256i Dot4Scaled(__m256i u, __m256i s, int a, int b) {
  return _mm256_mullo_epi32(Dot4(u, s), _mm256_set_m128i(_mm_set1_epi32(b), _mm_set1_epi32(a)));
}
inline __m256i Dot4ScaledPair(__m256i u, __m256i s, const int8_t* sc, __m256i, int j) {
  return Dot4Scaled(u, s, sc[2 * j], sc[2 * j + 1]);
}

#include "ops/quant_dot_x86.inc"
#include "ops/quant_convert_x86.inc"

// Q5_K a block per four 512-bit passes of 64 values, for T tokens (xb[i] token i's
// activation block): pass c is sub-blocks 2c and 2c + 1, the low and high nibbles of the 32 bytes
// qs[32c, 32c + 32), so its codes in the activations' order are [low nibbles | high nibbles]. One
// 64-byte load, masked and shifted once, gives two passes' codes by regrouping 256-bit halves.
// vpmaddubsw makes pair sums (at most 2 * 31 * 127) and vpdpwssd adds them times each sub-block's
// 6-bit scale into the lane sums, exactly. The codes and scales are unpacked once for all T tokens.
// The block functions are forced inline: left to itself GCC kept them out of line (they are large),
// so every block was a call that rebuilt its constants (bench/results/quant_kernels.md, "Inlined").
[[gnu::always_inline]] inline void Q5KCodes(const uint8_t* qs, const uint8_t* qh, __m512i* codes) {
  const __m512i m4 = _mm512_set1_epi8(15);
  for (int h = 0; h < 2; ++h) {
    const __m512i v = _mm512_loadu_si512(qs + 64 * h);
    const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    codes[2 * h] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
    codes[2 * h + 1] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
  }
  const __m512i hb = _mm512_broadcast_i64x4(Load32(qh));
  for (int c = 0; c < 4; ++c) {  // bit 2c of qh[l] for the low half's values, 2c + 1 for the high half's
    const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * c))),
                                           _mm256_set1_epi8(static_cast<char>(2 << (2 * c))), 1);
    codes[c] = _mm512_mask_add_epi8(codes[c], _mm512_test_epi8_mask(hb, bit), codes[c], _mm512_set1_epi8(16));
  }
}

template <int T>
[[gnu::always_inline]] inline void BlockQ5Kx512T(uint16_t d, uint16_t dmin, const uint8_t* scales, const uint8_t* qs,
                                                const uint8_t* qh, const ActBlock256* const* xb, __m512* acc) {
  uint32_t w[3], sc[2], mn[2];
  std::memcpy(w, scales, 12);
  sc[0] = w[0] & 0x3f3f3f3fu, sc[1] = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 6) & 0x03030303u) << 4;
  mn[0] = w[1] & 0x3f3f3f3fu, mn[1] = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 6) & 0x03030303u) << 4;
  // The eight scales as int16 in a vector; permutes hand each pass its two.
  const __m512i sc16 = _mm512_castsi128_si512(
      _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc[0] | uint64_t(sc[1]) << 32))));
  __m512i codes[4], scale[4];
  Q5KCodes(qs, qh, codes);
  for (int c = 0; c < 4; ++c) {
    const __m512i pick = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(2 * c)),
                                            _mm256_set1_epi16(static_cast<int16_t>(2 * c + 1)), 1);
    scale[c] = _mm512_permutexvar_epi16(pick, sc16);
  }
  const __m128i m8 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(mn[0] | uint64_t(mn[1]) << 32)));
  const __m256i mins = _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8), _mm_unpacklo_epi16(m8, m8));
  const float hd = Half(d), hmin = Half(dmin);
#pragma GCC unroll 16
  for (int i = 0; i < T; ++i) {
    __m512i i1 = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c)
      i1 = _mm512_dpwssd_epi32(i1, _mm512_maddubs_epi16(codes[c], _mm512_loadu_si512(xb[i]->q + 64 * c)), scale[c]);
    const __m256i i2 = _mm256_madd_epi16(Load32(xb[i]->bsums), mins);
    const __m512 a = _mm512_fmadd_ps(_mm512_set1_ps(xb[i]->d * hd), _mm512_cvtepi32_ps(i1), acc[i]);
    acc[i] = _mm512_fnmadd_ps(_mm512_set1_ps(xb[i]->d * hmin), _mm512_zextps256_ps512(_mm256_cvtepi32_ps(i2)), a);
  }
}

// The Q5_K and Q6_K rows for T tokens (T = 1 is the single-token row): each weight block's codes,
// scales (and Q5_K's minimums) unpacked once and used by all T tokens (x_stride bytes apart, outputs
// out_stride floats apart). Per token every operation and its order are the same for every T, so
// a token's result does not depend on how many tokens share the pass; only the unpacking is shared.
// A block unpacks first, then runs each token's chain in turn: a token's state is then one integer
// vector beside its accumulators, and all sixteen tokens fit one pass without spilling the codes.

// Q6_K a block per two 512-bit passes of 128 values, for T tokens: the half's 64 low-nibble bytes are values
// 0-63 (low nibbles) and 64-127 (high nibbles) in the activations' order; the 32 high-bit bytes,
// broadcast, give each quarter its two bits by a per-half shift. Each 128-bit lane is one 16-value
// sub-block, its signed scale folded in by vpdpwssd (vpmaddwd and the add in one instruction,
// exact); the offset 32 goes through the 16-value sums.
template <int T>
[[gnu::always_inline]] inline void BlockQ6Kx512T(const BlockQ6_K& w, const ActBlock256* const* xb, __m512* acc) {
  const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales))));
  const __m512i m4 = _mm512_set1_epi8(15), m3 = _mm512_set1_epi8(3);
  const __m512i lanes = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
  const __m512i s02 = _mm512_or_si512(_mm512_or_si512(lanes, _mm512_slli_epi64(lanes, 16)),
                                      _mm512_or_si512(_mm512_slli_epi64(lanes, 32), _mm512_slli_epi64(lanes, 48)));
  const __m512i s46 = _mm512_add_epi16(s02, _mm512_set1_epi16(4));
  const __m512i quarter = _mm512_setr_epi32(0, 0, 0, 0, 0x00010001, 0x00010001, 0x00010001, 0x00010001, 0x00020002, 0x00020002,
                                            0x00020002, 0x00020002, 0x00030003, 0x00030003, 0x00030003, 0x00030003);
  __m512i codes[4], scale[4];  // index 2h + k: half h, its low (k = 0) or high nibbles
  for (int h = 0; h < 2; ++h) {
    const __m512i l = _mm512_loadu_si512(w.ql + 64 * h);
    const __m512i q = _mm512_broadcast_i64x4(Load32(w.qh + 32 * h));
    codes[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(q, s02), m3), 4));
    codes[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                       _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(q, s46), m3), 4));
    for (int k = 0; k < 2; ++k)
      scale[2 * h + k] = _mm512_permutexvar_epi16(_mm512_add_epi16(quarter, _mm512_set1_epi16(static_cast<int16_t>(8 * h + 4 * k))), sc16);
  }
  // -32 * scale per sub-block (at most 4096 in magnitude): one vpdpwssd with the token's 16-value
  // sums takes the offset off lanes 0-7, exactly.
  const __m512i offset = _mm512_zextsi256_si512(_mm256_mullo_epi16(_mm512_castsi512_si256(sc16), _mm256_set1_epi16(-32)));
  const float hd = Half(w.d);
#pragma GCC unroll 16
  for (int i = 0; i < T; ++i) {
    __m512i isum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(Load32(xb[i]->bsums)), offset);
    for (int c = 0; c < 4; ++c)
      isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(codes[c], _mm512_loadu_si512(xb[i]->q + 64 * c)), scale[c]);
    acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(xb[i]->d * hd), _mm512_cvtepi32_ps(isum), acc[i]);
  }
}

// Token i's activation rows: xp + i * x_stride.
template <typename X, int T>
inline void TokenRows(const void* xp, int64_t x_stride, const X** x) {
  for (int i = 0; i < T; ++i) x[i] = reinterpret_cast<const X*>(static_cast<const char*>(xp) + i * x_stride);
}

template <int T>
inline void StoreSums(const __m512* a0, const __m512* a1, float* out, int64_t out_stride) {
  for (int i = 0; i < T; ++i) out[i * out_stride] = _mm512_reduce_add_ps(_mm512_add_ps(a0[i], a1[i]));
}

struct RowQ5KTokens {
  template <int T>
  static void Row(const void* wp, const void* xp, int64_t x_stride, int64_t nb, float* out, int64_t out_stride) {
    const auto* w = static_cast<const BlockQ5_K*>(wp);
    const ActBlock256* x[T];
    const ActBlock256* xb[T];
    TokenRows<ActBlock256, T>(xp, x_stride, x);
    __m512 a0[T], a1[T];
    for (int i = 0; i < T; ++i) a0[i] = a1[i] = _mm512_setzero_ps();
    const auto block = [&](int64_t b, __m512* acc) __attribute__((always_inline)) {
      PrefetchAhead(w + b, sizeof(BlockQ5_K));
      for (int i = 0; i < T; ++i) xb[i] = x[i] + b;
      BlockQ5Kx512T<T>(w[b].d, w[b].dmin, w[b].scales, w[b].qs, w[b].qh, xb, acc);
    };
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) block(b, a0), block(b + 1, a1);
    if (b < nb) block(b, a0);
    StoreSums<T>(a0, a1, out, out_stride);
  }
};

struct RowQ6KTokens {
  template <int T>
  static void Row(const void* wp, const void* xp, int64_t x_stride, int64_t nb, float* out, int64_t out_stride) {
    const auto* w = static_cast<const BlockQ6_K*>(wp);
    const ActBlock256* x[T];
    const ActBlock256* xb[T];
    TokenRows<ActBlock256, T>(xp, x_stride, x);
    __m512 a0[T], a1[T];
    for (int i = 0; i < T; ++i) a0[i] = a1[i] = _mm512_setzero_ps();
    const auto block = [&](int64_t b, __m512* acc) __attribute__((always_inline)) {
      PrefetchAhead(w + b, sizeof(BlockQ6_K));
      for (int i = 0; i < T; ++i) xb[i] = x[i] + b;
      BlockQ6Kx512T<T>(w[b], xb, acc);
    };
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) block(b, a0), block(b + 1, a1);
    if (b < nb) block(b, a0);
    StoreSums<T>(a0, a1, out, out_stride);
  }
};

// The 32-value formats sixteen weight rows at a time, one row per 32-bit lane: each block's codes of the
// sixteen rows are transposed once into eight vectors (vector k: values 4k .. 4k + 3 of each row),
// then a token's block is eight vpdpbusd against its activation dwords broadcast, one conversion
// and one FMA for all sixteen rows, so the per-token work is the integer products alone and the
// unpacking is shared by every token of the call. Per token and lane the operations are the same
// whatever the number of tokens or rows: each token's result is the same in any batch.

// Where the sixteen rows are: FullRows, all stride bytes apart (the addresses then come from two
// registers), or SomeRows, the last rows of a call, fewer than sixteen (lanes past them repeat row 0).

#include "ops/transpose16_avx512.inc"

// Bytes [off, off + 16) of the sixteen rows as TransposeRows16 lays them out; kBytes 8: bytes
// [off, off + 8) as the first two vectors (the last dwords of a run).
template <int kBytes = 16, typename Rows>
[[gnu::always_inline]] inline void Transpose16(const Rows& p, int64_t off, __m512i* v) {
  TransposeRows16<kBytes == 8>([&](int r) { return RowBytes<kBytes>(p(r) + off); }, v);
}

// The nibble codes of four dwords (transposed): c[m] the low nibbles of v[m], c[m + 4] the high ones.
[[gnu::always_inline]] inline void AlignedNibbles(const __m512i* v, __m512i c[8]) {
  const __m512i m4 = _mm512_set1_epi8(15);
  for (int m = 0; m < 4; ++m) c[m] = _mm512_and_si512(v[m], m4), c[m + 4] = _mm512_and_si512(_mm512_srli_epi32(v[m], 4), m4);
}

// Codes (unsigned) and the offset the format's values are taken from: Q4_0 nibbles minus 8, Q5_0
// five-bit codes minus 16; Q8_0's signed bytes with the top bit flipped are q + 128; Q4_1 / Q5_1
// codes have no offset but a minimum (the f16 after d), added per block as m (dx sum of q).
// `at`: the rows' offsets from p(0), for the gathers.
template <typename Rows>
[[gnu::always_inline]] inline void Nibbles16(const Rows& p, int64_t off, __m512i c[8]) {
  __m512i v[4];
  Transpose16(p, off, v);
  AlignedNibbles(v, c);
}
// Byte k of each 128-bit lane = 4 * (k / 4): added to a pshufb index in 0..3, it picks that byte of
// the index's own dword.
inline __m512i DwordStarts16() { return _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0); }
// Adds 16 to the codes whose fifth bit is set; lane r of qh is row r's qh as a little-endian uint32.
// Vector m holds values 4m .. 4m + 3, whose bits are nibble m & 1 of qh's byte m / 2: a byte shuffle
// copies that byte to the lane's four bytes, and one bit test per byte picks each value's bit.
[[gnu::always_inline]] inline void FifthBits16(__m512i qh, __m512i c[8]) {
  const __m512i lane_bytes = DwordStarts16();
  const __m512i low = _mm512_set1_epi32(0x08040201), high = _mm512_set1_epi32(static_cast<int>(0x80402010u));
  const __m512i sixteen = _mm512_set1_epi8(16);
  for (int k = 0; k < 4; ++k) {
    const __m512i bytes = _mm512_shuffle_epi8(qh, _mm512_add_epi8(lane_bytes, _mm512_set1_epi8(static_cast<char>(k))));
    c[2 * k] = _mm512_mask_add_epi8(c[2 * k], _mm512_test_epi8_mask(bytes, low), c[2 * k], sixteen);
    c[2 * k + 1] = _mm512_mask_add_epi8(c[2 * k + 1], _mm512_test_epi8_mask(bytes, high), c[2 * k + 1], sixteen);
  }
}
template <typename W, typename Rows>
[[gnu::always_inline]] inline void Codes16(const Rows& p, __m512i at, int64_t off, __m512i c[8]) {
  if constexpr (std::is_same_v<W, BlockQ8_0>) {
    Transpose16(p, off + offsetof(BlockQ8_0, qs), c);
    Transpose16(p, off + offsetof(BlockQ8_0, qs) + 16, c + 4);
    const __m512i top = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int k = 0; k < 8; ++k) c[k] = _mm512_xor_si512(c[k], top);
  } else {
    Nibbles16(p, off + offsetof(W, qs), c);
    if constexpr (std::is_same_v<W, BlockQ5_0> || std::is_same_v<W, BlockQ5_1>)
      FifthBits16(_mm512_i32gather_epi32(at, p(0) + off + offsetof(W, qh), 1), c);
  }
}
template <typename W>
constexpr int kOffset16 = std::is_same_v<W, BlockQ4_0> ? 8 : std::is_same_v<W, BlockQ5_0> ? 16 : std::is_same_v<W, BlockQ8_0> ? 128 : 0;
template <typename W>
constexpr bool kHasMin16 = std::is_same_v<W, BlockQ4_1> || std::is_same_v<W, BlockQ5_1>;

// A token's integer sum over one block of the sixteen rows (codes c as Codes16 lays them out), in
// two exact chains (half the latency of one), the offset's products (init) taken off first.
[[gnu::always_inline]] inline __m512i BlockSum16(const __m512i c[8], const int8_t* q, int init) {
  auto xk = [&](int k) { return _mm512_broadcastd_epi32(_mm_loadu_si32(q + 4 * k)); };
  __m512i s0 = _mm512_set1_epi32(init), s1 = _mm512_setzero_si512();
  for (int k = 0; k < 4; ++k) s0 = _mm512_dpbusd_epi32(s0, c[k], xk(k)), s1 = _mm512_dpbusd_epi32(s1, c[k + 4], xk(k + 4));
  return _mm512_add_epi32(s0, s1);
}

// The sixteen f16 values in the low (kHigh false) or high halves of v's dwords, in f32.
template <bool kHigh>
[[gnu::always_inline]] inline __m512 Halves16(__m512i v) {
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(kHigh ? _mm512_srli_epi32(v, 16) : v));
}

// The sixteen-row lanes for the runs of quant_runs_x86.inc (its header says what each member does).
struct L16 {
  using V = __m512i;
  using F = __m512;
  template <typename Rows>
  [[gnu::always_inline]] static void Transpose(const Rows& p, int64_t off, V* v) { Transpose16(p, off, v); }
  template <typename Rows>
  [[gnu::always_inline]] static void TransposeHalf(const Rows& p, int64_t off, V* v) { Transpose16<8>(p, off, v); }
  template <bool kHigh>
  [[gnu::always_inline]] static F Halves(V v) { return Halves16<kHigh>(v); }
  [[gnu::always_inline]] static V TwoBytesOn(V a, V b) {
    return _mm512_or_si512(_mm512_srli_epi32(a, 16), _mm512_slli_epi32(b, 16));
  }
  [[gnu::always_inline]] static void Nibbles(const V* d, V* c) { AlignedNibbles(d, c); }
  [[gnu::always_inline]] static void FifthBits(V qh, V* c) { FifthBits16(qh, c); }
};

#include "ops/quant_runs_x86.inc"

// G::Group<T> over the rows sixteen at a time (the last group's lanes past the rows repeat row 0,
// their outputs not stored), each group prefetching the next one's rows.
template <typename G, int T>
[[gnu::noinline]] void RowGroups16(const void* wp, int64_t w_stride, int64_t rows, const void* xq, int64_t xq_stride,
                                   int64_t nb, float* out, int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(wp);
  const char* x = static_cast<const char*>(xq);
  const __m512i full_at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(static_cast<int32_t>(w_stride)));
  int64_t r = 0;
  for (; r + 16 <= rows; r += 16) {
    const int64_t next_rows = std::min<int64_t>(16, rows - r - 16);
    G::template Group<T>(FullRows{w + r * w_stride, w_stride}, full_at, x, xq_stride, nb, out + r, out_stride, 0xffff,
                         next_rows > 0 ? w + (r + 16) * w_stride : nullptr, next_rows * w_stride);
  }
  if (r == rows) return;
  const int left = static_cast<int>(rows - r);
  const uint8_t* p[16];
  alignas(64) int32_t at[16];
  for (int i = 0; i < 16; ++i) p[i] = w + (r + (i < left ? i : 0)) * w_stride, at[i] = static_cast<int32_t>(p[i] - p[0]);
  G::template Group<T>(SomeRows{p}, _mm512_load_si512(at), x, xq_stride, nb, out + r, out_stride,
                       static_cast<__mmask16>((1u << left) - 1));
}

// Bytes [from, to) of the next group's rows into L2 (why L2: Lanes16's Group below), a line per 64
// bytes from `from`; none when next is null.
[[gnu::always_inline]] inline void PrefetchPart16(const uint8_t* next, int64_t from, int64_t to) {
  if (next)
    for (int64_t l = from; l < to; l += 64) _mm_prefetch(reinterpret_cast<const char*>(next + l), _MM_HINT_T1);
}

template <typename W>
struct Lanes16 {
  // Token i's term of one block: sum s against its activation block xb, the rows' scales dw and
  // (kMin) minimums mw.
  [[gnu::always_inline]] static __m512 AddBlock(__m512 dw, __m512 mw, __m512i s, const ActBlock32& xb, __m512 acc) {
    acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xb.d)), _mm512_cvtepi32_ps(s), acc);
    if constexpr (kHasMin16<W>) acc = _mm512_fmadd_ps(mw, _mm512_set1_ps(xb.d * static_cast<float>(xb.sum)), acc);
    return acc;
  }
  // Token i's terms of one block (token i's activation block at xb0 + i * x_stride): its integer
  // sum against the codes c, then AddBlock.
  template <int T>
  [[gnu::always_inline]] static void Tokens(__m512 dw, __m512 mw, const __m512i* c, const char* xb0, int64_t x_stride,
                                            __m512* acc) {
#pragma GCC unroll 16
    for (int i = 0; i < T; ++i) {
      const auto& xb = *reinterpret_cast<const ActBlock32*>(xb0 + i * x_stride);
      acc[i] = AddBlock(dw, mw, BlockSum16(c, xb.q, -kOffset16<W> * xb.sum), xb, acc[i]);
    }
  }
  // One block at byte `off` of the rows on its own: the f16 d is each block's first two bytes (a
  // 4-byte gather; the high half is m where the format has one, else dropped).
  template <typename Rows>
  [[gnu::always_inline]] static void OneBlock(const Rows& p, __m512i at, int64_t off, __m512* dw, __m512* mw,
                                              __m512i* c) {
    const __m512i dm_raw = _mm512_i32gather_epi32(at, p(0) + off, 1);
    *dw = Halves16<false>(dm_raw);
    *mw = kHasMin16<W> ? Halves16<true>(dm_raw) : *dw;
    Codes16<W>(p, at, off, c);
  }

  // Sixteen rows (p: FullRows or SomeRows, their offsets from p(0) in `at`), T tokens (token i's
  // activation blocks at x + i * x_stride); outputs where `keep` has a lane's bit.
  // `next` (or null): the next group's rows, next_bytes from there, prefetched a slice per block so
  // they arrive while this group computes (the hardware prefetcher does not keep up with sixteen
  // short interleaved row streams when the weights come from memory). Into L2, not L1: a group's
  // sixteen rows fill an L1 or more at Gemma's widths, so the next group's lines fetched into L1
  // compete with the current group's (T0 decoded slower: bench/results/quant_kernels.md).
  // Per token the sums and their order are the same on either path (runs, or one block), so results
  // do not depend on which path a block took. Forced inline into RowGroups16, as GCC inlined it before
  // the runs made it larger (tests/prefetch_emitted.sh looks for the prefetch in RowGroups16).
  template <int T, typename Rows>
  [[gnu::always_inline]] static void Group(const Rows& p, __m512i at, const char* x, int64_t x_stride, int64_t nb,
                                           float* out, int64_t out_stride, __mmask16 keep,
                                           const uint8_t* next = nullptr, int64_t next_bytes = 0) {
    const int64_t slice = (next_bytes + nb - 1) / nb;
    auto prefetch = [&](int64_t b) __attribute__((always_inline)) { PrefetchPart16(next, b * slice, (b + 1) * slice); };
    __m512 acc[T];
#pragma GCC unroll 16
    for (int i = 0; i < T; ++i) acc[i] = _mm512_setzero_ps();
    auto xb = [&](int64_t b) { return x + b * int64_t(sizeof(ActBlock32)); };
    constexpr int kRun = Run<L16, W>::kBlocks;
    int64_t b = 0;
    if constexpr (kRun > 0)
      for (; b + kRun <= nb; b += kRun)
        RunBlocks<L16, W>(p, b * int64_t(sizeof(W)), [&](int j, __m512 dw, __m512 mw, const __m512i* c)
                                                          __attribute__((always_inline)) {
          prefetch(b + j);
          Tokens<T>(dw, mw, c, xb(b + j), x_stride, acc);
        });
    for (; b < nb; ++b) {
      prefetch(b);
      __m512 dw, mw;
      __m512i c[8];
      OneBlock(p, at, b * int64_t(sizeof(W)), &dw, &mw, c);
      Tokens<T>(dw, mw, c, xb(b), x_stride, acc);
    }
    for (int i = 0; i < T; ++i) _mm512_mask_storeu_ps(out + i * out_stride, keep, acc[i]);
  }
};

// Q4_K sixteen rows at a time, the AVX2 eight-row kernel's steps (quant_dot_avx2.cc, GroupK45) on
// sixteen lanes: each 64-value chunk of the sixteen rows transposed once (vector m: values 4m ..
// 4m + 3 of a sub-block, row r in lane r), a token's 32-value sub-block eight vpdpbusd against its
// broadcast activation dwords (|sum| <= 32 * 15 * 128: exact in 32 bits), times the rows' 6-bit
// scale by vpmulld; the minimums one vpdpwssd per two sub-blocks. Each lane's integer sums and f32
// steps are the AVX2 kernel's, so the two give the same bits, and a token's result does not depend
// on the rows or tokens beside it. All of a call's tokens in one pass, up to sixteen: past eight
// their integer and f32 sums no longer all fit the registers beside the codes, and the spills cost
// less than a second pass unpacking every block again. (The one-row kernel before it spent a
// vpmaddubsw and a vpdpwssd per 64 values of one row and token, then a reduction across lanes: a
// token cost more than the unpacking it shared.) Q5_K keeps that kernel: on sixteen lanes, with its
// fifth bits, one token streamed from memory more slowly (bench/results/small_batch.md, "Q4_K
// sixteen rows at a time").
struct LanesQ4K16 {
  // The sixteen rows' per-block values: sc[j] lane r = scale j of row r; mn[q] lane r = (minimum 2q,
  // minimum 2q + 1) of row r as 16-bit halves; d and dmin in f32.
  struct Header {
    __m512i sc[8], mn[4];
    __m512 d, dmin;
  };
  // pshufb mask: in each dword, byte b0 of the source dword into byte 0 and b1 into byte 2, zeros
  // elsewhere (b1 < 0: only b0, zero-extended to the dword).
  static __m512i PickBytes(int b0, int b1) {
    const int v = b0 | 0x80 << 8 | (b1 < 0 ? 0x80 : b1) << 16 | 0x80 << 24;
    return _mm512_add_epi8(_mm512_set1_epi32(v), DwordStarts16());
  }
  // The 16 header bytes of each row's block (d, dmin, the 12 packed scale bytes) transposed, then
  // the 6-bit scales and minimums unpacked for all sixteen rows at once, as ggml packs them.
  template <typename Rows>
  [[gnu::always_inline]] static void Load(const Rows& p, int64_t off, Header& k) {
    __m512i v[4];
    Transpose16(p, off, v);
    k.d = Halves16<false>(v[0]), k.dmin = Halves16<true>(v[0]);
    const __m512i m6 = _mm512_set1_epi8(0x3f), m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x03);
    auto top2 = [&](__m512i u) { return _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u, 6), m2), 4); };
    const __m512i u0 = v[1], u1 = v[2], u2 = v[3];
    const __m512i s0 = _mm512_and_si512(u0, m6), s1 = _mm512_or_si512(_mm512_and_si512(u2, m4), top2(u0));
    const __m512i n0 = _mm512_and_si512(u1, m6);
    const __m512i n1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m4), top2(u1));
    for (int j = 0; j < 8; ++j) k.sc[j] = _mm512_shuffle_epi8(j < 4 ? s0 : s1, PickBytes(j % 4, -1));
    for (int q = 0; q < 4; ++q) k.mn[q] = _mm512_shuffle_epi8(q < 2 ? n0 : n1, PickBytes(2 * (q % 2), 2 * (q % 2) + 1));
  }
  // The minimums' integer sums of the sixteen rows against a token's block: sum_j mn_j (x sum of j).
  [[gnu::always_inline]] static __m512i Mins(const Header& k, const ActBlock256& xb) {
    const __m256i xs = _mm256_madd_epi16(Load32(xb.bsums), _mm256_set1_epi16(1));  // lane j: sub-block j's sum
    const __m512i pairs = _mm512_castsi256_si512(_mm256_packs_epi32(xs, xs));  // exact: |sum| <= 32 * 127
    __m512i s = _mm512_setzero_si512();
    for (int q = 0; q < 4; ++q)  // dwords 0, 1, 4, 5 of pairs: sub-blocks (0, 1), (2, 3), (4, 5), (6, 7)
      s = _mm512_dpwssd_epi32(s, k.mn[q], _mm512_permutexvar_epi32(_mm512_set1_epi32(q / 2 * 4 + q % 2), pairs));
    return s;
  }
  template <int T, typename Rows>
  [[gnu::always_inline]] static void Group(const Rows& p, __m512i, const char* x, int64_t x_stride, int64_t nb,
                                           float* out, int64_t out_stride, __mmask16 keep,
                                           const uint8_t* next = nullptr, int64_t next_bytes = 0) {
    const int64_t slice = (next_bytes + nb - 1) / nb;
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512 acc[T];
    for (int i = 0; i < T; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t off = b * int64_t(sizeof(BlockQ4_K));
      const char* xb0 = x + b * int64_t(sizeof(ActBlock256));
      Header k;
      Load(p, off, k);
      __m512i isum[T];
      for (int i = 0; i < T; ++i) isum[i] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {  // chunk c: bytes 32c .. of qs, sub-blocks 2c (low nibbles), 2c + 1
        __m512i v[8];
        for (int h = 0; h < 2; ++h) Transpose16(p, off + offsetof(BlockQ4_K, qs) + 32 * c + 16 * h, v + 4 * h);
        for (int h = 0; h < 2; ++h) {
          const int j = 2 * c + h;
          PrefetchPart16(next, b * slice + j * slice / 8, b * slice + (j + 1) * slice / 8);
          __m512i codes[8];
          for (int m = 0; m < 8; ++m) codes[m] = _mm512_and_si512(h ? _mm512_srli_epi32(v[m], 4) : v[m], m4);
          for (int i = 0; i < T; ++i) {
            const int8_t* q = reinterpret_cast<const ActBlock256*>(xb0 + i * x_stride)->q + 32 * j;
            isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(BlockSum16(codes, q, 0), k.sc[j]));
          }
        }
      }
      for (int i = 0; i < T; ++i) {
        const ActBlock256& xb = *reinterpret_cast<const ActBlock256*>(xb0 + i * x_stride);
        const __m512 xd = _mm512_set1_ps(xb.d);
        acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(k.d, xd), _mm512_cvtepi32_ps(isum[i]), acc[i]);
        acc[i] = _mm512_fnmadd_ps(_mm512_mul_ps(k.dmin, xd), _mm512_cvtepi32_ps(Mins(k, xb)), acc[i]);
      }
    }
    for (int i = 0; i < T; ++i) _mm512_mask_storeu_ps(out + i * out_stride, keep, acc[i]);
  }
};

// K::Row<T> over the rows, T = tokens.
template <typename K, int T>
void RowsT(const void* w, int64_t w_stride, int64_t rows, const void* xq, int64_t xq_stride, int64_t nb, float* out,
           int64_t out_stride) {
  for (int64_t r = 0; r < rows; ++r)
    K::template Row<T>(static_cast<const char*>(w) + r * w_stride, xq, xq_stride, nb, out + r, out_stride);
}

// Every kernel here takes all of a call's tokens (1 .. kQuantDotTokens) in one pass, each block
// read and unpacked once: the 32-value formats' sixteen accumulators and a block's eight code
// vectors fit the 32 registers; the K-quants' per-token sums spill past eight tokens, which costs
// less than a second pass unpacking every block again. Groups: G's sixteen-row groups; Rows: K's
// one-row kernel.
template <typename G>
void GroupsTokens(const void* w, int64_t w_stride, int64_t rows, const void* xq, int64_t xq_stride, int tokens,
                  int64_t nb, float* out, int64_t out_stride) {
  WithTokens<kQuantDotTokens>(tokens, [&](auto t) {
    RowGroups16<G, decltype(t)::value>(w, w_stride, rows, xq, xq_stride, nb, out, out_stride);
  });
}
template <typename K>
void RowsTokens(const void* w, int64_t w_stride, int64_t rows, const void* xq, int64_t xq_stride, int tokens,
                int64_t nb, float* out, int64_t out_stride) {
  WithTokens<kQuantDotTokens>(tokens, [&](auto t) {
    RowsT<K, decltype(t)::value>(w, w_stride, rows, xq, xq_stride, nb, out, out_stride);
  });
}

using RowsTokensFn = void (*)(const void* w, int64_t w_stride, int64_t rows, const void* xq, int64_t xq_stride,
                              int tokens, int64_t nb, float* out, int64_t out_stride);

// Type t's kernel, in dot_rows_tokens' signature: every block type has one (null for kNone, which
// falls to quant_dot_x86.inc's DotRows as before: no blocks, nothing written).
RowsTokensFn Kernel512(QuantType t) {
  switch (t) {
    case QuantType::kQ4_0: return GroupsTokens<Lanes16<BlockQ4_0>>;
    case QuantType::kQ4_1: return GroupsTokens<Lanes16<BlockQ4_1>>;
    case QuantType::kQ5_1: return GroupsTokens<Lanes16<BlockQ5_1>>;
    case QuantType::kQ5_0: return GroupsTokens<Lanes16<BlockQ5_0>>;
    case QuantType::kQ8_0: return GroupsTokens<Lanes16<BlockQ8_0>>;
    case QuantType::kQ4_K: return GroupsTokens<LanesQ4K16>;
    case QuantType::kQ5_K: return RowsTokens<RowQ5KTokens>;
    case QuantType::kQ6_K: return RowsTokens<RowQ6KTokens>;
    default: return nullptr;
  }
}

void DotRows512(QuantType t, const void* w, int64_t w_stride, int64_t rows, const void* xq, int64_t nb, float* out) {
  if (const RowsTokensFn k = Kernel512(t)) return k(w, w_stride, rows, xq, 0, 1, nb, out, 0);
  DotRows(t, w, w_stride, rows, xq, nb, out);
}

void DotRowsTokens512(QuantType t, const void* w, int64_t w_stride, int64_t rows, const void* xq, int64_t xq_stride,
                      int tokens, int64_t nb, float* out, int64_t out_stride) {
  if (const RowsTokensFn k = Kernel512(t)) return k(w, w_stride, rows, xq, xq_stride, tokens, nb, out, out_stride);
  for (int i = 0; i < tokens; ++i)
    DotRows(t, w, w_stride, rows, static_cast<const char*>(xq) + i * xq_stride, nb, out + i * out_stride);
}

}  // namespace

const QuantDotKernels& QuantDotAvx512Kernels() {
  static const QuantDotKernels k{"avx512-vnni", kQuantDotTokens, DotRows512, DotRowsTokens512, QuantizeAct, Dequantize,
                                 [](QuantType t, int) { return t != QuantType::kNone; }};
  return k;
}

}  // namespace tessera::ops
