// AVX-512-BF16 implementation of ops/bf16_dot.h, compiled with -mavx512bf16 and called only on
// CPUs that have it. No shared inline functions or templates from headers here (simd_avx2.cc).
#include <immintrin.h>

#include "ops/bf16_dot.h"
#include "ops/exp_poly.h"

namespace tessera::ops {
namespace {

// The bf16 pair *word in all 16 lanes. The word may sit at any 2-byte boundary (a K row of a view
// with an odd element stride), so it is read with memcpy (one broadcast load).
inline __m512bh Broadcast2(const uint32_t* word) {
  int32_t w;
  __builtin_memcpy(&w, word, 4);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(w));
}

// acc += a . broadcast(*word) over bf16 pairs.
inline __m512 Dot2(__m512 acc, __m512i a, const uint32_t* word) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), Broadcast2(word));
}

// Issues the lines of a PrefetchRows evenly over `steps` calls of Step() (Bresenham: each step
// adds the line count and issues a line per `steps` accumulated).
class LineFeeder {
 public:
  LineFeeder(const PrefetchRows* pf, int64_t steps) : steps_(steps) {
    // (Callers run a loop without Step() calls when active() is false: even a no-op Step() in the
    // pair loop costs prefill measurably, bench/results/kernel_choices.md, "LineFeeder outside the
    // pair loop".)
    if (pf == nullptr || pf->rows <= 0 || steps <= 0) return;
    row_ = static_cast<const char*>(pf->first);
    stride_ = pf->stride, row_bytes_ = pf->row_bytes;
    left_ = pf->rows * ((pf->row_bytes + 63) / 64);
    per_step_ = left_;
  }
  bool active() const { return left_ > 0; }
  void Step() {
    for (acc_ += per_step_; acc_ >= steps_ && left_ > 0; acc_ -= steps_, --left_) {
      __builtin_prefetch(row_ + offset_, 0, 1);
      if ((offset_ += 64) >= row_bytes_) offset_ = 0, row_ += stride_;
    }
  }

 private:
  const char* row_ = nullptr;
  int64_t stride_ = 0, row_bytes_ = 0, offset_ = 0, left_ = 0, per_step_ = 0, acc_ = 0, steps_;
};

// Eight keys against the panel: one panel load and eight broadcast dot products per pair. (Not
// inlined: inside ScoreRows16's loop four of the eight key pointers spilled to vector registers.)
template <bool kFeed>
__attribute__((noinline)) void ScoreKeys8(const uint32_t* qp, int64_t pairs, const uint32_t* const* k, float* out,
                                          int nk, LineFeeder& pf) {
  __m512 total[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) total[j] = _mm512_setzero_ps();
  for (int64_t p0 = 0; p0 < pairs; p0 += 32) {
    const int64_t p1 = p0 + 32 < pairs ? p0 + 32 : pairs;
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
    for (int64_t p = p0; p < p1; ++p) {
      if (kFeed && (p & 3) == 0) pf.Step();
      const __m512i q = _mm512_load_si512(qp + p * 16);
      c0 = Dot2(c0, q, k[0] + p);
      c1 = Dot2(c1, q, k[1] + p);
      c2 = Dot2(c2, q, k[2] + p);
      c3 = Dot2(c3, q, k[3] + p);
      c4 = Dot2(c4, q, k[4] + p);
      c5 = Dot2(c5, q, k[5] + p);
      c6 = Dot2(c6, q, k[6] + p);
      c7 = Dot2(c7, q, k[7] + p);
    }
    total[0] = _mm512_add_ps(total[0], c0);
    total[1] = _mm512_add_ps(total[1], c1);
    total[2] = _mm512_add_ps(total[2], c2);
    total[3] = _mm512_add_ps(total[3], c3);
    total[4] = _mm512_add_ps(total[4], c4);
    total[5] = _mm512_add_ps(total[5], c5);
    total[6] = _mm512_add_ps(total[6], c6);
    total[7] = _mm512_add_ps(total[7], c7);
  }
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    if (j >= nk) break;
    _mm512_storeu_ps(out + j * 16, total[j]);
  }
}

void ScoreRows16(const uint32_t* qp, int64_t pairs, const uint16_t* const* k_rows, int n, float* out,
                 const PrefetchRows* ahead) {
  LineFeeder pf(ahead, (pairs + 3) / 4 * ((n + 7) / 8));
  for (int t0 = 0; t0 < n; t0 += 8) {
    const int nk = n - t0 < 8 ? n - t0 : 8;
    const uint32_t* k[8];
    for (int j = 0; j < 8; ++j) k[j] = reinterpret_cast<const uint32_t*>(k_rows[t0 + (j < nk ? j : 0)]);
    if (pf.active()) {
      ScoreKeys8<true>(qp, pairs, k, out + t0 * 16, nk, pf);
    } else {
      ScoreKeys8<false>(qp, pairs, k, out + t0 * 16, nk, pf);
    }
  }
}

// Word j of the result is (x[j], x[16 + j]): the 16 elements of x's low half paired with its high half's.
alignas(64) constexpr uint16_t kPairHalves[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                  8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

void ScoresToRows(const float* st, int n, float scale, float* s, int64_t s_stride, int rows) {
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                         _mm512_set1_epi32(16));
  for (int t0 = 0; t0 < n; t0 += 16) {
    const __mmask16 m = n - t0 >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - t0)) - 1u);
    for (int r = 0; r < rows; ++r) {
      const __m512 x = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, st + t0 * 16 + r, 4);
      _mm512_mask_storeu_ps(s + r * s_stride + t0, m, _mm512_mul_ps(x, vs));
    }
  }
}

void PairsFromF32(const float* x, int64_t n, uint32_t* w) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(w + i / 2, reinterpret_cast<__m512i>(h));
  }
  if (i < n) {  // the tail: zeros past n, stored only up to the last pair
    const int64_t left = n - i;
    const __mmask16 m0 = left >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
    const __mmask16 m1 = left > 16 ? static_cast<__mmask16>((1u << (left - 16)) - 1u) : 0;
    const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, x + i + 16), _mm512_maskz_loadu_ps(m0, x + i));
    const int64_t pairs = (left + 1) / 2;
    _mm512_mask_storeu_epi32(w + i / 2, static_cast<__mmask16>((1u << pairs) - 1u), reinterpret_cast<__m512i>(h));
  }
}

// R rows x C column panels (16 columns each): C panel loads and R broadcasts feed R x C dot
// products per pair. Every output is one chain over the pairs in order, whatever R and C, so a row
// gets the same bits in any tile shape (decode's single rows and prefill's 8-row tiles alike).
// Panels past the C live ones are never read (they may lie past the matrix); the last live one is
// stored up to nr.
template <int R, int C, bool kFeed>
void PvTileRC(const uint32_t* const* w, const uint32_t* vp, int64_t pairs, int64_t vp_stride, float* c, int64_t cs,
              int mr, int nr, LineFeeder& pf) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < C; ++q) acc[r][q] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    if (kFeed && (p & 3) == 0) pf.Step();
    __m512bh v[C];
#pragma GCC unroll 8
    for (int q = 0; q < C; ++q) v[q] = reinterpret_cast<__m512bh>(_mm512_load_si512(vp + q * vp_stride + p * 16));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh b = Broadcast2(w[r] + p);
#pragma GCC unroll 8
      for (int q = 0; q < C; ++q) acc[r][q] = _mm512_dpbf16_ps(acc[r][q], v[q], b);
    }
  }
  // Rows and panels unrolled with constant indices so the accumulators stay in registers.
  const int last = nr - 16 * (C - 1);
  const __mmask16 m_last = static_cast<__mmask16>(last >= 16 ? 0xffffu : (1u << last) - 1u);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (r >= mr) break;
    float* cr = c + r * cs;
#pragma GCC unroll 8
    for (int q = 0; q < C; ++q) {
      const __mmask16 m = q == C - 1 ? m_last : __mmask16(0xffff);
      _mm512_mask_storeu_ps(cr + 16 * q, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, cr + 16 * q), acc[r][q]));
    }
  }
}

// PvTileRC for `live` (1..C) panels: the instance whose C is the live count.
template <int R, int C, bool kFeed>
void PvLivePanels(int live, const uint32_t* const* w, const uint32_t* vp, int64_t pairs, int64_t vp_stride, float* c,
                  int64_t cs, int mr, int nr, LineFeeder& pf) {
  if constexpr (C > 1) {
    if (live < C) return PvLivePanels<R, C - 1, kFeed>(live, w, vp, pairs, vp_stride, c, cs, mr, nr, pf);
  }
  PvTileRC<R, C, kFeed>(w, vp, pairs, vp_stride, c, cs, mr, nr, pf);
}

// One R-row strip in calls of up to kMaxC panels.
template <int R, int kMaxC, bool kFeed>
void PvStrip(const uint32_t* const* w, const uint32_t* vp, int64_t pairs, int64_t vp_stride, float* c, int64_t cs,
             int mr, int nr, LineFeeder& pf) {
  for (int j0 = 0; j0 < nr; j0 += 16 * kMaxC) {
    const int cols = nr - j0 < 16 * kMaxC ? nr - j0 : 16 * kMaxC;
    PvLivePanels<R, kMaxC, kFeed>((cols + 15) / 16, w, vp + (j0 / 16) * vp_stride, pairs, vp_stride, c + j0, cs, mr,
                                  cols, pf);
  }
}

// A strip as tall as the tile's live rows: rows computed past mr are dot products thrown away, and
// past 4 rows the dot-product unit, not memory, bounds the tile (an 8-row strip for 5 tokens cost
// what 8 did; bench/results/small_batch.md). 8 rows: 8 x 2 panels; 5-7: R x 3; 3-4: R x 4; 2: 2 x 8;
// 1: 1 x 8 (8 independent chains, which a decode GEMV needs: one 8-row tile for a single token did 8x
// the dot products, bench/results/kernel_choices.md, "Tile shapes of the bf16 P.V rows"). At most 21
// accumulators of the 32 registers.
constexpr int PvStripPanels(int mr) { return mr > 7 ? 2 : mr > 4 ? 3 : mr > 2 ? 4 : 8; }

template <bool kFeed>
void PvTileRows(const uint32_t* const* w, const uint32_t* vp, int64_t pairs, int64_t vp_stride, float* c, int64_t cs,
                int mr, int nr, LineFeeder& pf) {
  switch (mr) {
    case 1: return PvStrip<1, PvStripPanels(1), kFeed>(w, vp, pairs, vp_stride, c, cs, mr, nr, pf);
    case 2: return PvStrip<2, PvStripPanels(2), kFeed>(w, vp, pairs, vp_stride, c, cs, mr, nr, pf);
    case 3: return PvStrip<3, PvStripPanels(3), kFeed>(w, vp, pairs, vp_stride, c, cs, mr, nr, pf);
    case 4: return PvStrip<4, PvStripPanels(4), kFeed>(w, vp, pairs, vp_stride, c, cs, mr, nr, pf);
    case 5: return PvStrip<5, PvStripPanels(5), kFeed>(w, vp, pairs, vp_stride, c, cs, mr, nr, pf);
    case 6: return PvStrip<6, PvStripPanels(6), kFeed>(w, vp, pairs, vp_stride, c, cs, mr, nr, pf);
    case 7: return PvStrip<7, PvStripPanels(7), kFeed>(w, vp, pairs, vp_stride, c, cs, mr, nr, pf);
    default: return PvStrip<8, PvStripPanels(8), kFeed>(w, vp, pairs, vp_stride, c, cs, mr, nr, pf);
  }
}

void PvTile(const uint32_t* const* w, const uint32_t* vp, int64_t pairs, int64_t vp_stride, float* c, int64_t cs,
            int mr, int nr, const PrefetchRows* ahead) {
  const int strip = 16 * PvStripPanels(mr);  // columns per kernel call
  LineFeeder pf(ahead, (pairs + 3) / 4 * ((nr + strip - 1) / strip));
  if (pf.active()) return PvTileRows<true>(w, vp, pairs, vp_stride, c, cs, mr, nr, pf);
  PvTileRows<false>(w, vp, pairs, vp_stride, c, cs, mr, nr, pf);
}

// (gcc 12 flags the undefined pass-through operand inside several AVX-512 intrinsics, from here
// to PvRowsT and in Transpose16x16 below, as maybe-uninitialized: false positives, silenced there.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "ops/exp16_avx512.inc"

void SoftmaxPanel16(const float* st, int n, float scale, float* m, float* l, int mr, bool all_visible, float* alpha,
                    uint32_t* w) {
  const __mmask16 rows = mr >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << mr) - 1u);
  const __m512 vs = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(-__builtin_inff()), zero = _mm512_setzero_ps();
  // check: NaN in a lane that met a non-finite score. All visible: the sum of x * 0 (0 * +-inf is
  // NaN); else the sum of x, where masked keys' -inf give -inf and only a NaN gives NaN.
  const __m512 factor = all_visible ? zero : _mm512_set1_ps(1.0f);
  __m512 tile_max = neg_inf, check = zero;
  for (int t = 0; t < n; ++t) {
    const __m512 x = _mm512_mul_ps(_mm512_load_ps(st + t * 16), vs);
    tile_max = _mm512_max_ps(tile_max, x);
    check = _mm512_fmadd_ps(x, factor, check);
  }
  const __m512 m_old = _mm512_mask_loadu_ps(neg_inf, rows, m);
  const __mmask16 poisoned = _mm512_cmp_ps_mask(check, check, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(m_old, m_old, _CMP_UNORD_Q);
  const __m512 nan = _mm512_set1_ps(__builtin_nanf(""));
  const __m512 m_new = _mm512_mask_blend_ps(poisoned, _mm512_max_ps(m_old, tile_max), nan);
  // A row whose max moved scales its state by exp(m_old - m_new) (0 from -inf); others by 1. A
  // row with no finite score yet subtracts 0, so its -inf scores give weight 0, not NaN. A
  // poisoned row subtracts NaN: NaN weights, sum and alpha (Exp16 passes NaN through).
  const __mmask16 moved = _mm512_cmp_ps_mask(m_old, m_new, _CMP_NEQ_UQ);
  const __mmask16 dead = _mm512_cmp_ps_mask(m_new, neg_inf, _CMP_EQ_OQ);
  const __m512 a = _mm512_mask_blend_ps(moved, _mm512_set1_ps(1.0f), Exp16(_mm512_sub_ps(m_old, m_new)));
  const __m512 m_sub = _mm512_mask_blend_ps(dead, m_new, zero);
  const __m512i halves = _mm512_load_si512(kPairHalves);
  __m512 sum = zero;
  for (int t = 0; t < n; t += 2) {
    const __m512 e0 = Exp16(_mm512_sub_ps(_mm512_mul_ps(_mm512_load_ps(st + t * 16), vs), m_sub));
    const __m512 e1 =
        t + 1 < n ? Exp16(_mm512_sub_ps(_mm512_mul_ps(_mm512_load_ps(st + (t + 1) * 16), vs), m_sub)) : zero;
    sum = _mm512_add_ps(_mm512_add_ps(sum, e0), e1);
    const __m512i h = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(e1, e0));  // words: e0's lanes, then e1's
    _mm512_store_si512(w + t / 2 * 16, _mm512_permutexvar_epi16(halves, h));
  }
  _mm512_mask_storeu_ps(m, rows, m_new);
  _mm512_mask_storeu_ps(l, rows, _mm512_fmadd_ps(_mm512_mask_loadu_ps(zero, rows, l), a, sum));
  _mm512_storeu_ps(alpha, a);
}

// Where unpacklo/unpackhi_epi16 of two 32-column rows put each column's pair: per 128-bit lane L,
// lo holds columns 8L..8L+3 and hi 8L+4..8L+7. Entry j is the lane of output column j in a
// vpermt2ps of (lo, hi) (0-15: lo, 16-31: hi); entries 0-15 give columns 0-15, 16-31 columns 16-31.
struct alignas(64) LaneTable {
  int32_t lane[32];
};
constexpr LaneTable UnpackedLanes() {
  LaneTable t{};
  for (int j = 0; j < 32; ++j) t.lane[j] = j % 8 < 4 ? 4 * (j / 8) + j % 8 : 16 + 4 * (j / 8) + j % 8 - 4;
  return t;
}
constexpr LaneTable kUnpackedLanes = UnpackedLanes();

// c = alpha c + acc over the columns in m (alpha null: 1).
inline void AddScaled(float* c, __mmask16 m, const float* alpha, __m512 acc) {
  const __m512 old = _mm512_maskz_loadu_ps(m, c);
  _mm512_mask_storeu_ps(c, m, alpha ? _mm512_fmadd_ps(old, _mm512_set1_ps(*alpha), acc) : _mm512_add_ps(old, acc));
}

// P.V with V read in place for kRows <= 8 rows, 32 columns per pass: the 32 columns of key rows 2p
// and 2p + 1 (one cache line each) are interleaved into pairs by one unpacklo and one unpackhi,
// which leave the columns in the lane order of kUnpackedLanes, put back once per pass at the store.
// Each pair's weight broadcast feeds two dot products, so a 16-row panel runs as two 8-row groups
// (V read twice from cache). The weights are key-major ([pair][16 rows], w at the group's first
// row), so the broadcasts address from one pointer. Against 16 rows x 16 columns per pass (two
// 32-byte loads, an insert and a word permute per pair, a broadcast per dot product, o rescaled in
// a pass of its own) this is faster, halving the broadcasts being what counts
// (bench/results/kernel_choices.md, "bf16 P.V in 8 x 32 passes").
template <int kRows, bool kFeed, bool kSomeKeys>
void PvRowsT(const uint32_t* w, const uint16_t* v, int64_t v_stride, int n, uint64_t keys, float* c, int64_t cs,
             int mr, const float* alpha, int64_t cols, LineFeeder& pf) {
  const __m512i lanes_lo = _mm512_load_si512(kUnpackedLanes.lane);
  const __m512i lanes_hi = _mm512_load_si512(kUnpackedLanes.lane + 16);
  const int64_t pairs = (n + 1) / 2, full = n / 2;
  for (int64_t c0 = 0; c0 < cols; c0 += 32) {
    const int64_t left = cols - c0;
    const __mmask32 m = left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << left) - 1u);
    __m512 lo_acc[kRows], hi_acc[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) lo_acc[r] = hi_acc[r] = _mm512_setzero_ps();
    const uint16_t* a = v + c0;
    for (int64_t p = 0; p < pairs; ++p, a += 2 * v_stride) {
      if (kFeed && (p & 3) == 0) pf.Step();
      __m512i x, y;
      if (kSomeKeys) {  // a key not in `keys` reads as zeros (its row may hold anything, even NaN)
        x = _mm512_maskz_loadu_epi16((keys >> (2 * p)) & 1 ? m : 0, a);
        y = _mm512_maskz_loadu_epi16((keys >> (2 * p + 1)) & 1 ? m : 0, a + v_stride);
      } else {
        x = _mm512_maskz_loadu_epi16(m, a);
        y = p < full ? _mm512_maskz_loadu_epi16(m, a + v_stride) : _mm512_setzero_si512();
      }
      const __m512i lo = _mm512_unpacklo_epi16(x, y), hi = _mm512_unpackhi_epi16(x, y);
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const __m512bh b = Broadcast2(w + p * 16 + r);
        lo_acc[r] = _mm512_dpbf16_ps(lo_acc[r], reinterpret_cast<__m512bh>(lo), b);
        hi_acc[r] = _mm512_dpbf16_ps(hi_acc[r], reinterpret_cast<__m512bh>(hi), b);
      }
    }
    const __mmask16 m0 = static_cast<__mmask16>(m), m1 = static_cast<__mmask16>(m >> 16);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      if (r >= mr) break;
      float* cr = c + r * cs + c0;
      const float* ar = alpha ? alpha + r : nullptr;
      AddScaled(cr, m0, ar, _mm512_permutex2var_ps(lo_acc[r], lanes_lo, hi_acc[r]));
      if (m1) AddScaled(cr + 16, m1, ar, _mm512_permutex2var_ps(lo_acc[r], lanes_hi, hi_acc[r]));
    }
  }
}

#pragma GCC diagnostic pop

// One group of up to kRows rows: every key read, or some. The per-key load masks cost a decode
// where all keys are read (bench/results/kernel_choices.md, "Per-key load masks"), so they have
// their own instantiation.
template <int kRows>
void PvGroup(const uint32_t* w, const uint16_t* v, int64_t v_stride, int n, uint64_t keys, bool every_key,
             float* c, int64_t cs, int mr, const float* alpha, int64_t cols, LineFeeder& pf) {
  if (every_key) {
    if (pf.active()) return PvRowsT<kRows, true, false>(w, v, v_stride, n, keys, c, cs, mr, alpha, cols, pf);
    return PvRowsT<kRows, false, false>(w, v, v_stride, n, keys, c, cs, mr, alpha, cols, pf);
  }
  if (pf.active()) return PvRowsT<kRows, true, true>(w, v, v_stride, n, keys, c, cs, mr, alpha, cols, pf);
  PvRowsT<kRows, false, true>(w, v, v_stride, n, keys, c, cs, mr, alpha, cols, pf);
}

void PvRows16(const uint32_t* w, const uint16_t* v, int64_t v_stride, int n, uint64_t keys, float* c, int64_t cs,
              int mr, const float* alpha, int64_t cols, const PrefetchRows* ahead) {
  const int groups = mr > 8 ? 2 : 1;
  LineFeeder pf(ahead, groups * ((cols + 31) / 32) * (((n + 1) / 2 + 3) / 4));
  const uint64_t all = n < 64 ? (uint64_t{1} << n) - 1 : ~uint64_t{0};
  keys &= all;  // (so the pair past an odd n reads nothing)
  for (int g = 0; g < groups; ++g) {
    const int rows = mr - 8 * g < 8 ? mr - 8 * g : 8;
    const float* ag = alpha ? alpha + 8 * g : nullptr;
    if (rows <= 4) {
      PvGroup<4>(w + 8 * g, v, v_stride, n, keys, keys == all, c + 8 * g * cs, cs, rows, ag, cols, pf);
    } else {
      PvGroup<8>(w + 8 * g, v, v_stride, n, keys, keys == all, c + 8 * g * cs, cs, rows, ag, cols, pf);
    }
  }
}

// Transposes 16 x 16 words in place: afterwards r[j] holds word j of the 16 input vectors.
// (gcc 12 without optimization flags the unpack intrinsics' internal undefined pass-through
// operand as maybe-uninitialized: a false positive, silenced here only.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
inline void Transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {  // 128-bit lanes: rows 0-7 with 8-15 in two steps
    t[i] = _mm512_shuffle_i32x4(r[i], r[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_i32x4(r[i], r[4 + i], 0xdd);
    t[8 + i] = _mm512_shuffle_i32x4(r[8 + i], r[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_i32x4(r[8 + i], r[12 + i], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0xdd);
    r[4 + i] = _mm512_shuffle_i32x4(t[4 + i], t[12 + i], 0x88);
    r[12 + i] = _mm512_shuffle_i32x4(t[4 + i], t[12 + i], 0xdd);
  }
}
#pragma GCC diagnostic pop

// 16 rows x 16 words per step: masked loads (an odd last column reads only its own element), one
// in-register transpose, 16 aligned panel stores. (A gather per panel vector was slower,
// bench/results/kernel_choices.md, "Packing pair panels".)
void PackWeightPairs16(const uint16_t* src, int64_t stride, int64_t rows, int64_t cols, uint32_t* dst) {
  const int64_t pairs = (cols + 1) / 2;
  for (int64_t c = 0; c * 16 < rows; ++c) {
    const int64_t nr = rows - c * 16 < 16 ? rows - c * 16 : 16;
    const uint16_t* block = src + c * 16 * stride;
    for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
      const int64_t left = cols - 2 * p0;  // elements left in each row
      const __mmask32 m = left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << left) - 1u);
      __m512i r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = i < nr ? _mm512_maskz_loadu_epi16(m, block + i * stride + 2 * p0) : _mm512_setzero_si512();
      Transpose16x16(r);
      const int64_t np = pairs - p0 < 16 ? pairs - p0 : 16;
      for (int64_t j = 0; j < np; ++j) _mm512_store_si512(dst + (c * pairs + p0 + j) * 16, r[j]);
    }
  }
}

}  // namespace

const Bf16DotKernels& Bf16DotAvx512() {
  static const Bf16DotKernels k{ScoreRows16,    ScoresToRows, PairsFromF32, SoftmaxPanel16,
                                PvTile,         PvRows16,     PackWeightPairs16};
  return k;
}

}  // namespace tessera::ops
