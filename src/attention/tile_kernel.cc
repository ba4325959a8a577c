#include "attention/tile_kernel.h"

#include "ops/bf16_amx_attention.h"
#include "ops/bf16_dot.h"
#include "ops/prefetch_rows.h"
#include "ops/simd.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <limits>

namespace tessera::attn {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Sub-buffers are rounded to 16 floats so each starts on a 64-byte boundary.
int64_t Pad16(int64_t n) { return (n + 15) / 16 * 16; }

constexpr int64_t kScoreChunk = 64;  // head dims summed per FMA chain in the packed score path

// Head dims in the packed score path's chain from d0: kScoreChunk, with a last piece shorter than 16
// joined to the chunk before it (D 72: one chain, not 64 + 8, whose second micro-tile call loads and
// stores the scores around 8 steps of arithmetic).
int64_t ScoreChunk(int64_t d0, int64_t D) { return D - d0 < kScoreChunk + 16 ? D - d0 : kScoreChunk; }
int64_t ScoreChunks(int64_t D) {
  int64_t chunks = 0;
  for (int64_t d0 = 0; d0 < D; d0 += ScoreChunk(d0, D)) ++chunks;
  return chunks;
}
// How far ahead the few-row path prefetches: K rows into L1, and K and V rows into L2 (at D 256
// bf16: 16 KiB and 64 KiB of each stream).
constexpr int64_t kPrefetchKeys = 32;
constexpr int64_t kPrefetchL2Keys = 128;

// Asks for every cache line of [p, p + bytes) into L1 (Locality 3) or L2 (Locality 1); a hint:
// no fault, no wait. Forced inline: a call to a function whose only effect is a prefetch is one GCC
// may delete as dead code (it did so to the quantized rows' prefetch).
template <int Locality>
[[gnu::always_inline]] inline void Prefetch(const void* p, int64_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + static_cast<uintptr_t>(bytes);
  for (uintptr_t line = begin & ~uintptr_t{63}; line < end; line += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(line), 0, Locality);
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Whether x is NaN or +-inf, from its exponent bits (integer ops, which vectorize and do not
// depend on the FP comparison's NaN rules).
inline uint32_t NonFinite(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  return (u & 0x7f800000u) == 0x7f800000u;
}

// The bf16 dot-product path's scratch: q panels, one panel's scores, one panel's weight pairs,
// and the AMX panels' (taken whether or not AMX is on now, so that a switch between planning and
// running cannot outgrow the plan).
int64_t DotScratchFloats(int64_t D, int64_t max_rows) {
  return Pad16((max_rows + 15) / 16 * 16 * (D / 2)) + kTileK * 16 + kTileK / 2 * 16 +
         Pad16(ops::AmxAttentionScratchBytes(D) / 4);
}

// Issues the lines of a PrefetchRows into L2 a few at a time (Issue(k) asks for the next k), for
// drivers that interleave them with their micro-kernel calls.
class LineFeed {
 public:
  explicit LineFeed(const ops::PrefetchRows& pf)
      : row_(static_cast<const char*>(pf.first)), stride_(pf.stride), row_bytes_(pf.row_bytes),
        left_(pf.rows * ((pf.row_bytes + 63) / 64)) {}
  int64_t lines() const { return left_; }
  void Issue(int64_t k) {
    for (; k > 0 && left_ > 0; --k, --left_) {
      __builtin_prefetch(row_ + offset_, 0, 1);
      if ((offset_ += 64) >= row_bytes_) offset_ = 0, row_ += stride_;
    }
  }

 private:
  const char* row_;
  int64_t stride_, row_bytes_, offset_ = 0, left_;
};

}  // namespace

int64_t GroupTileKernel::ScratchFloats(const AttentionParams& p, int64_t max_rows) {
  const int64_t D = p.q.dim, Dv = p.v.dim;
  // The packed K/V tiles exist only for blocks that can reach kPackedRows rows.
  const bool many = max_rows >= kPackedRows;
  const int64_t packed = many ? Pad16(kTileK * D) + kTileK * Pad16(Dv) : 0;
  const int64_t dot = many && p.precision == AttentionPrecision::kBf16 ? DotScratchFloats(D, max_rows) : 0;
  return Pad16(max_rows * D) + Pad16(max_rows * kTileK) + packed + dot + Pad16(max_rows * Dv) + 2 * Pad16(max_rows);
}

GroupTileKernel::TilePath GroupTileKernel::WidePath(const AttentionParams& p, const ops::Bf16DotKernels* dot) {
  if (dot == nullptr) return TilePath::kPacked;
  // The fused panel path has no soft cap and no bias term: those need the scores as rows.
  return p.softcap <= 0 && !p.mask.dense.present() ? TilePath::kDot : TilePath::kDotRows;
}

GroupTileKernel::GroupTileKernel(const AttentionParams& p, int64_t max_rows, float* scratch)
    : p_(p), group_(p.q.heads / p.k.heads), D_(p.q.dim), Dv_(p.v.dim) {
  float* next = scratch;
  auto take = [&next](int64_t n) {
    float* out = next;
    next += Pad16(n);
    return out;
  };
  q_ = take(max_rows * D_);
  s_ = take(max_rows * kTileK);
  if (max_rows >= kPackedRows) {
    kp_ = take(kTileK * D_);
    vp_ = take(kTileK * Pad16(Dv_));
  }
  bf16_ = p.precision == AttentionPrecision::kBf16;
  if (bf16_ && max_rows >= kPackedRows) {
    pairs_ = D_ / 2;
    qw_ = reinterpret_cast<uint32_t*>(take((max_rows + 15) / 16 * 16 * pairs_));
    st_ = take(kTileK * 16);
    pw_ = reinterpret_cast<uint32_t*>(take(kTileK / 2 * 16));
    if (D_ % 2 == 0) dot_ = ops::Bf16Dot();  // (an odd head_dim stays on the f32 kernels)
    float* amx = take(ops::AmxAttentionScratchBytes(D_) / 4);
    if (dot_ && ops::AmxAttentionUsable()) amx_ = amx;
  }
  wide_path_ = WidePath(p, dot_);
  if (max_rows >= kPackedRows) wide_ = ops::GemmTileWide();
  o_ = take(max_rows * Dv_);
  m_ = take(max_rows);
  l_ = take(max_rows);
}

GroupTileKernel::~GroupTileKernel() {
  if (amx_) ops::AmxRelease();
}

void GroupTileKernel::Begin(int64_t b, int64_t g, int64_t i0, int64_t n_q) {
  b_ = b, g_ = g, i0_ = i0, n_q_ = n_q, rows_ = group_ * n_q;
  valid_ = n_q == 1 ? QueryKvValid(p_, b, i0) : KvValid(p_.mask, b, p_.k.seq);
  path_ = rows_ >= kPackedRows ? wide_path_ : TilePath::kInPlace;
  const bool dot = DotScores();  // scores from the q panels, not from q_
  for (int64_t r = 0; r < rows_; ++r) {
    const int64_t h = g * group_ + r / n_q, i = i0 + r % n_q;
    const float* src = reinterpret_cast<const float*>(p_.q.At(b, h, i));
    float* dst = q_ + r * D_;
    if (dot) {
      dot_->pairs_from_f32(src, D_, reinterpret_cast<uint32_t*>(dst));  // q_'s row as a bf16 row
    } else if (bf16_) {
      for (int64_t d = 0; d < D_; ++d) dst[d] = Bf16ToF32(F32ToBf16(src[d])) * p_.scale;
    } else {
      for (int64_t d = 0; d < D_; ++d) dst[d] = src[d] * p_.scale;
    }
    std::fill(o_ + r * Dv_, o_ + (r + 1) * Dv_, 0.0f);
    m_[r] = kNegInf;
    l_[r] = 0.0f;
  }
  // q as bf16 pairs in 16-row panels, word (p, r) = (q[r][2p], q[r][2p + 1]): the bf16 rows in q_
  // transposed as 32-bit words, zeros for rows past rows_ in the last panel.
  if (dot)
    for (int64_t r0 = 0; r0 < rows_; r0 += 16)
      dot_->pack_weight_pairs16(reinterpret_cast<const uint16_t*>(q_ + r0 * D_), 2 * D_,
                                std::min<int64_t>(16, rows_ - r0), D_, qw_ + r0 * pairs_);
}

// Scores, then the mask and the online softmax step, then P.V, along the block's path; a fully
// visible tile's P.V runs for all rows at once (FullTilePv), a partly visible one's row by row.
void GroupTileKernel::ConsumeTile(int64_t j0, int64_t j1, TileClass cls) {
  if (cls == TileClass::kEmpty) return;
  const int64_t n = j1 - j0;
  // K/V rows in their stored dtype; the SIMD kernels widen bf16/f16 in registers, so each byte
  // is read from memory once per KV head and reused from cache by every query row of the group.
  const void* k_rows[kTileK];
  const void* v_rows[kTileK];
  for (int64_t t = 0; t < n; ++t) {
    k_rows[t] = p_.k.At(b_, g_, j0 + t);
    v_rows[t] = p_.v.At(b_, g_, j0 + t);
  }
  switch (path_) {
    case TilePath::kDot: return ConsumeTileDot(j0, n, cls, k_rows, v_rows);
    case TilePath::kDotRows: DotRowScores(j0, n, k_rows); break;
    case TilePath::kPacked: PackedScores(j0, n, k_rows); break;
    case TilePath::kInPlace: InPlaceScores(j0, n, cls, k_rows); break;
  }
  SoftmaxRows(j0, n, cls, v_rows);
  if (cls == TileClass::kFull && path_ != TilePath::kDotRows) FullTilePv(j0, n, v_rows);
}

// Rows [t, t + count) of the tile, kPrefetchL2Keys keys ahead and clipped to the view: lines to
// prefetch into L2 a few at a time while computing (by a dot-path micro-kernel, or by LineFeed
// between the packed path's micro-tile calls), never in one burst.
ops::PrefetchRows GroupTileKernel::RowsAhead(const HeadsView& view, int64_t j0, int64_t t, int64_t count) const {
  ops::PrefetchRows pf;
  const int64_t first = j0 + t + kPrefetchL2Keys;
  pf.rows = std::clamp<int64_t>(view.seq - first, 0, count);
  if (pf.rows > 0) {
    pf.first = view.At(b_, g_, first);
    const int64_t es = static_cast<int64_t>(DTypeSize(view.dtype));
    pf.stride = view.stride_seq * es, pf.row_bytes = view.dim * es;
  }
  return pf;
}

// Scores on the bf16 dot product: 16-row q panel r0 against the K rows in place, key-major into
// st_ (unscaled: q was rounded before the scale). Eight keys per call; with the first panel go,
// for those keys, in decode the L2 prefetch of the K rows kPrefetchL2Keys ahead, issued by the
// micro-kernel one line every few dot products (V's likewise in P.V): the same prefetches issued
// in a burst before each call filled the miss queue and stalled the core (bench/results/attention.md,
// "Attention at precision bf16, and decode prefetch spread over the arithmetic").
void GroupTileKernel::PanelScores(int64_t r0, int64_t j0, int64_t n, const void* const* k_rows) {
  const uint16_t* const* k16 = reinterpret_cast<const uint16_t* const*>(k_rows);
  if (amx_) {  // (the tile rows are at K's row stride from the tile's first key)
    const ops::PrefetchRows k_ahead = RowsAhead(p_.k, j0, 0, r0 == 0 && n_q_ == 1 ? n : 0);
    return ops::AmxScores16(qw_ + r0 * pairs_, pairs_, k16[0], p_.k.stride_seq, static_cast<int>(n), st_, &k_ahead,
                            amx_);
  }
  for (int64_t t0 = 0; t0 < n; t0 += 8) {
    const int nk = static_cast<int>(std::min<int64_t>(8, n - t0));
    const ops::PrefetchRows k_ahead = RowsAhead(p_.k, j0, t0, r0 == 0 && n_q_ == 1 ? nk : 0);
    dot_->score_rows16(qw_ + r0 * pairs_, pairs_, k16 + t0, nk, st_ + t0 * 16, &k_ahead);
  }
}

// kDotRows: the panels' scores transposed into s_ rows and scaled, for the row-wise soft cap,
// bias, mask, softmax and P.V.
void GroupTileKernel::DotRowScores(int64_t j0, int64_t n, const void* const* k_rows) {
  for (int64_t r0 = 0; r0 < rows_; r0 += 16) {
    PanelScores(r0, j0, n, k_rows);
    dot_->scores_to_rows(st_, static_cast<int>(n), p_.scale, s_ + r0 * kTileK, kTileK,
                         static_cast<int>(std::min<int64_t>(16, rows_ - r0)));
  }
}

// kPacked: scores on the GEMM micro-tile into s_ (q_ is scaled): the K tile widened and
// transposed once into 16-key panels, then six query rows at a time against each panel.
void GroupTileKernel::PackedScores(int64_t j0, int64_t n, const void* const* k_rows) {
  const ops::SimdKernels& simd = ops::Simd();
  const DType dt = p_.k.dtype;
  for (int64_t t = 0; t < n; t += 16)
    simd.pack_panel16(dt, k_rows[t], p_.k.stride_seq, static_cast<int>(std::min<int64_t>(16, n - t)), D_,
                      kp_ + t * D_);
  // Each score sums kScoreChunk-long FMA chains: one chain over all of D (up to 512 terms) loses
  // accuracy that the 16-lane dot products did not. In decode (one query position, the tile
  // streams from DRAM once) the K rows kPrefetchL2Keys ahead are asked into L2 a few lines per
  // micro-tile call (and V's during P.V), so DRAM requests keep flowing
  // (bench/results/kernel_choices.md, "Decode L2 prefetch in the packed score path"). Prefill
  // re-reads each tile from cache.
  if (wide_ != nullptr && n_q_ > 1) return WideScores(n);
  LineFeed feed(RowsAhead(p_.k, j0, 0, n_q_ == 1 ? n : 0));
  const int64_t calls = (rows_ + 5) / 6 * ScoreChunks(D_) * ((n + 15) / 16);
  const int64_t per_call = (feed.lines() + calls - 1) / calls;
  for (int64_t r0 = 0; r0 < rows_; r0 += 6) {
    const int mr = static_cast<int>(std::min<int64_t>(6, rows_ - r0));
    for (int64_t d0 = 0, kc = 0; d0 < D_; d0 += kc) {
      kc = ScoreChunk(d0, D_);
      const float* a[6];
      for (int r = 0; r < 6; ++r) a[r] = q_ + (r0 + (r < mr ? r : 0)) * D_ + d0;
      for (int64_t t = 0; t < n; t += 16, feed.Issue(per_call))
        simd.gemm_tile(a, kp_ + t * D_ + d0 * 16, kc, s_ + r0 * kTileK + t, kTileK, mr,
                       static_cast<int>(std::min<int64_t>(16, n - t)), d0 > 0, nullptr, 0);
    }
  }
}

// PackedScores on the wide micro-tile (prefill blocks, where the tile is compute-bound and nothing
// is prefetched): eight query rows against two packed 16-key panels per call, the same FMA chains
// (kScoreChunk dims each) as the 6 x 16 tile's.
// Rows innermost: each call's two K panels (kScoreChunk dims of 32 keys) stay in L1 for every
// row group, rather than the whole packed tile streaming from L2 once per row group.
void GroupTileKernel::WideScores(int64_t n) {
  for (int64_t d0 = 0, kc = 0; d0 < D_; d0 += kc) {
    kc = ScoreChunk(d0, D_);
    for (int64_t t = 0; t < n; t += 32) {
      for (int64_t r0 = 0; r0 < rows_; r0 += ops::kWideTileRows) {
        const int mr = static_cast<int>(std::min<int64_t>(ops::kWideTileRows, rows_ - r0));
        const float* a[ops::kWideTileRows];
        for (int r = 0; r < ops::kWideTileRows; ++r) a[r] = q_ + (r0 + (r < mr ? r : 0)) * D_ + d0;
        wide_(a, kp_ + t * D_ + d0 * 16, 16 * D_, kc, s_ + r0 * kTileK + t, kTileK, mr,
              static_cast<int>(std::min<int64_t>(32, n - t)), d0 > 0, {});
      }
    }
  }
}

// kInPlace (few rows: decode with a small group): K and V read in place, each once from memory.
// With so little arithmetic per byte the core waits on DRAM unless loads are issued well ahead
// (the hardware prefetcher alone leaves much of the bandwidth unused), so each key's pass also
// prefetches the K row kPrefetchKeys ahead and this tile's V row (read by P.V) into L1. L1
// prefetches hold one of the core's few L1 miss slots for a whole DRAM round trip, so the K and V
// rows kPrefetchL2Keys ahead are also asked into L2, whose larger miss queue keeps more lines in
// flight. A full tile's P.V asks for its V rows ahead itself (FullTilePv). Rows go in pairs that
// widen each K element once (dot2). Measurements: bench/results/kernel_choices.md, "Decode
// prefetch in the in-place score path".
void GroupTileKernel::InPlaceScores(int64_t j0, int64_t n, TileClass cls, const void* const* k_rows) {
  const ops::SimdKernels& simd = ops::Simd();
  const DType dt = p_.k.dtype;
  // The key `keys` past tile key t, clamped to the view.
  auto key_ahead = [&](int64_t t, int64_t keys) { return std::min(j0 + t + keys, p_.k.seq - 1); };
  const int64_t k_bytes = D_ * DTypeSize(p_.k.dtype), v_bytes = Dv_ * DTypeSize(p_.v.dtype);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t ahead = key_ahead(t, kPrefetchKeys), far = key_ahead(t, kPrefetchL2Keys);
    Prefetch<1>(p_.k.At(b_, g_, far), k_bytes);
    if (cls != TileClass::kFull) Prefetch<1>(p_.v.At(b_, g_, far), v_bytes);
    Prefetch<3>(p_.k.At(b_, g_, ahead), k_bytes);
    Prefetch<3>(p_.v.At(b_, g_, j0 + t), v_bytes);
    int64_t r = 0;
    for (; r + 2 <= rows_; r += 2) {
      float two[2];
      simd.Dot2(dt, q_ + r * D_, q_ + (r + 1) * D_, k_rows[t], D_, two);
      s_[r * kTileK + t] = two[0];
      s_[(r + 1) * kTileK + t] = two[1];
    }
    if (r < rows_) s_[r * kTileK + t] = simd.Dot(dt, q_ + r * D_, k_rows[t], D_);
  }
}

// A partly visible tile's mask on one panel's key-major scores: -inf where masked, NaN where a
// visible key's score is not finite (softmax_panel16 then makes the row NaN). seen_by[t] gets the
// panel rows that see key t (bit r); returns the keys some row sees.
uint64_t GroupTileKernel::MaskPanel(int64_t r0, int mr, int64_t j0, int64_t n, uint16_t* seen_by) {
  const MaskSpec& m = p_.mask;
  const int64_t S_q = p_.q.seq, S_kv = p_.k.seq;
  std::fill(seen_by, seen_by + n, uint16_t{0});
  for (int r = 0; r < mr; ++r) {
    const int64_t i = i0_ + (r0 + r) % n_q_;
    const int32_t qp = m.q_pos[b_ * S_q + i], qb = m.q_block ? m.q_block[b_ * S_q + i] : -1;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t j = j0 + t;
      const int32_t kb = m.k_block ? m.k_block[b_ * S_kv + j] : -1;
      float& s = st_[t * 16 + r];
      if (j < valid_ && StructuredVisible(m, qp, qb, m.k_pos[b_ * S_kv + j], kb)) {
        seen_by[t] = static_cast<uint16_t>(seen_by[t] | 1u << r);
        if (NonFinite(s)) s = kNaN;
      } else {
        s = kNegInf;
      }
    }
  }
  uint64_t keys = 0;
  for (int64_t t = 0; t < n; ++t) keys |= uint64_t{seen_by[t] != 0} << t;
  return keys;
}

// P.V multiplies every row's weight by each key's V, so a row's weight 0 for a key it cannot see
// would meet that key's V: 0 * inf or 0 * NaN is NaN. Returns the keys seen by only part of the
// panel whose V is not finite, which go row by row instead (PvApart; rare: checked in partial tiles
// only, each key's V once per tile via *v_checked / *v_bad).
uint64_t GroupTileKernel::KeysApart(int mr, int64_t n, const uint16_t* seen_by, const void* const* v_rows,
                                    uint64_t* v_checked, uint64_t* v_bad) const {
  const uint32_t all = (1u << mr) - 1u;
  uint64_t mixed = 0;
  for (int64_t t = 0; t < n; ++t) mixed |= uint64_t{seen_by[t] != 0 && seen_by[t] != all} << t;
  for (uint64_t todo = mixed & ~*v_checked; todo; todo &= todo - 1) {
    const int t = __builtin_ctzll(todo);
    if (FirstNonFinite(DType::kBF16, v_rows[t], Dv_) >= 0) *v_bad |= uint64_t{1} << t;
  }
  *v_checked |= mixed;
  return mixed & *v_bad;
}

// P.V of the keys apart (KeysApart), only for the panel rows that see them.
void GroupTileKernel::PvApart(int64_t r0, int mr, uint64_t apart, const uint16_t* seen_by,
                              const void* const* v_rows) {
  for (; apart; apart &= apart - 1) {
    const int t = __builtin_ctzll(apart);
    for (int r = 0; r < mr; ++r) {
      if (!(seen_by[t] >> r & 1u)) continue;
      const uint32_t word = pw_[t / 2 * 16 + r];
      const float w = Bf16ToF32(static_cast<uint16_t>(t % 2 ? word >> 16 : word & 0xffffu));
      ops::Simd().Axpy(DType::kBF16, o_ + (r0 + r) * Dv_, w, v_rows[t], Dv_);
    }
  }
}

// kDot (bf16 dot product, no soft cap, no dense bias), one 16-row panel at a time: scores, the
// mask of a partly visible tile applied to them (-inf), the online softmax step key-major on the
// scores as they come (no transpose into rows; softmax_panel16 also rounds the weights to bf16
// pairs), then P.V against V read in place, each pair of V rows interleaved in registers. Against
// the row-major softmax and V packed into pair panels once per tile (64 KiB written and read back
// through L2) with 8-row passes over them, this is faster in decode and prefill
// (bench/results/attention.md, "Attention bf16 decode: P·V on V in place, key-major softmax").
void GroupTileKernel::ConsumeTileDot(int64_t j0, int64_t n, TileClass cls, const void* const* k_rows,
                                     const void* const* v_rows) {
  const ops::PrefetchRows v_ahead = RowsAhead(p_.v, j0, 0, n_q_ == 1 ? n : 0);
  float alpha[16];
  uint16_t seen_by[kTileK];
  uint64_t v_checked = 0, v_bad = 0;  // keys whose V row was checked / holds a NaN or an inf
  // On AMX, a fully visible tile's V pairs are packed once for all panels (in vp_, which this path
  // does not otherwise use): every panel reads every key there.
  const uint32_t* shared_v = nullptr;
  if (amx_ && cls == TileClass::kFull && rows_ > 16) {
    ops::AmxPackV(static_cast<const uint16_t*>(v_rows[0]), p_.v.stride_seq, static_cast<int>(n), ~uint64_t{0}, Dv_,
                  reinterpret_cast<uint32_t*>(vp_));
    shared_v = reinterpret_cast<const uint32_t*>(vp_);
  }
  for (int64_t r0 = 0; r0 < rows_; r0 += 16) {
    const int mr = static_cast<int>(std::min<int64_t>(16, rows_ - r0));
    PanelScores(r0, j0, n, k_rows);
    uint64_t keys = ~uint64_t{0};  // the keys some row of the panel sees: P.V reads only those
    uint64_t apart = 0;            // of those, keys added row by row (PvApart)
    if (cls == TileClass::kPartial) {
      keys = MaskPanel(r0, mr, j0, n, seen_by);
      apart = KeysApart(mr, n, seen_by, v_rows, &v_checked, &v_bad);
    }
    dot_->softmax_panel16(st_, static_cast<int>(n), p_.scale, m_ + r0, l_ + r0, mr, cls == TileClass::kFull, alpha,
                          pw_);
    // P.V also rescales the rows by alpha as it adds to them (no separate pass over o).
    bool rescale = false;
    for (int r = 0; r < mr; ++r) rescale |= alpha[r] != 1.0f;
    const uint16_t* v0 = static_cast<const uint16_t*>(v_rows[0]);
    if (amx_)
      ops::AmxPv16(pw_, shared_v, v0, p_.v.stride_seq, static_cast<int>(n), keys & ~apart, o_ + r0 * Dv_, Dv_, mr,
                   rescale ? alpha : nullptr, Dv_, r0 == 0 ? &v_ahead : nullptr, amx_);
    else
      dot_->pv_rows16(pw_, v0, p_.v.stride_seq, static_cast<int>(n), keys & ~apart, o_ + r0 * Dv_, Dv_, mr,
                      rescale ? alpha : nullptr, Dv_, r0 == 0 ? &v_ahead : nullptr);
    PvApart(r0, mr, apart, seen_by, v_rows);
  }
}

// Readies row r's scores of the tile for the softmax: the soft cap, and in a partly visible tile
// the mask (-inf) and the dense bias; *visible gets the keys the row sees (bit t). False when a
// visible key's score is not finite (checked before the cap, which maps +-inf to +-cap).
// (A full tile without a cap is checked by SoftmaxStep's max pass instead.)
bool GroupTileKernel::PrepareRow(int64_t r, int64_t j0, int64_t n, TileClass cls, uint64_t* visible) {
  float* s = s_ + r * kTileK;
  const float cap = p_.softcap;
  uint32_t bad = 0;
  if (cls == TileClass::kFull) {
    *visible = n < 64 ? (uint64_t{1} << n) - 1 : ~uint64_t{0};
    if (cap > 0)
      for (int64_t t = 0; t < n; ++t) {
        bad |= NonFinite(s[t]);
        s[t] = cap * std::tanh(s[t] / cap);
      }
    return bad == 0;
  }
  const MaskSpec& m = p_.mask;
  const int64_t h = g_ * group_ + r / n_q_, i = i0_ + r % n_q_;
  const int64_t S_q = p_.q.seq, S_kv = p_.k.seq;
  const int32_t qp = m.q_pos[b_ * S_q + i];
  const int32_t qb = m.q_block ? m.q_block[b_ * S_q + i] : -1;
  uint64_t vis = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t j = j0 + t;
    const int32_t kb = m.k_block ? m.k_block[b_ * S_kv + j] : -1;
    const bool seen = j < valid_ && StructuredVisible(m, qp, qb, m.k_pos[b_ * S_kv + j], kb);
    const float bias = seen && m.dense.present() ? DenseTerm(m.dense, b_, h, i, j) : 0.0f;
    if (!seen || bias == kNegInf) {
      s[t] = kNegInf;
      continue;
    }
    bad |= NonFinite(s[t]);  // (a NaN or +inf bias is refused by ValidateAttention)
    if (cap > 0) s[t] = cap * std::tanh(s[t] / cap);
    s[t] += bias;
    vis |= uint64_t{1} << t;
  }
  *visible = vis;
  return bad == 0;
}

// A row that met a non-finite score: NaN state (m_ NaN marks it), to which later tiles add nothing.
void GroupTileKernel::PoisonRow(int64_t r) {
  m_[r] = l_[r] = kNaN;
  std::fill(o_ + r * Dv_, o_ + (r + 1) * Dv_, kNaN);
}

// The mask and online softmax step of every row over its scores in s_ (kDotRows, kPacked,
// kInPlace), and P.V row by row where FullTilePv does not take the tile: partly visible tiles,
// and every tile on kDotRows.
void GroupTileKernel::SoftmaxRows(int64_t j0, int64_t n, TileClass cls, const void* const* v_rows) {
  const bool row_pv = cls != TileClass::kFull || path_ == TilePath::kDotRows;
  for (int64_t r = 0; r < rows_; ++r) {
    float* s = s_ + r * kTileK;
    uint64_t visible = 0;
    if (std::isnan(m_[r]) || !PrepareRow(r, j0, n, cls, &visible)) {
      if (!std::isnan(m_[r])) PoisonRow(r);
      if (cls == TileClass::kFull) std::fill(s, s + n, 0.0f);  // (FullTilePv reads every row)
      continue;
    }
    if (SoftmaxStep(r, n, cls) && row_pv) RowPv(r, n, visible, v_rows);
  }
}

// Row r's online softmax step over its prepared scores: the new running max rescales o_ and l_,
// the scores become the weights (rounded to bf16 at precision bf16; l_ keeps the unrounded sum).
// False when the row takes nothing from this tile: no visible key, or a non-finite score found by
// a full tile's max pass (the row is then poisoned and its weights zeroed for FullTilePv).
bool GroupTileKernel::SoftmaxStep(int64_t r, int64_t n, TileClass cls) {
  float* s = s_ + r * kTileK;
  const ops::SimdKernels& simd = ops::Simd();
  uint32_t bad = 0;
  const float tile_max = simd.row_max(s, n, &bad);
  // In a full tile without a cap the finiteness check rides on the max pass; otherwise
  // PrepareRow checked the visible scores, and masked ones are -inf.
  if (bad && cls == TileClass::kFull && p_.softcap <= 0) {
    PoisonRow(r);
    std::fill(s, s + n, 0.0f);
    return false;
  }
  if (tile_max == kNegInf) return false;  // nothing visible to this row in this tile (never a full tile)
  const float m_new = std::max(m_[r], tile_max);
  if (m_[r] != m_new) {
    const float alpha = std::exp(m_[r] - m_new);  // 0 when m_[r] is -inf
    l_[r] *= alpha;
    simd.scale(o_ + r * Dv_, alpha, Dv_);
    m_[r] = m_new;
  }
  // Softmax weights in place (masked keys, -inf, become 0).
  l_[r] += exp_sub_sum_(s, n, m_new);
  // The weights P.V multiplies are bf16 (l_ keeps the unrounded sum).
  if (bf16_)
    for (int64_t t = 0; t < n; ++t) s[t] = Bf16ToF32(F32ToBf16(s[t]));
  return true;
}

// Row r's P.V over the keys it sees (a masked key's V may hold anything, even NaN; a visible one
// counts even at weight 0, where 0 * inf is NaN as in the reference), four V rows per pass so the
// output row is loaded and stored once per four keys.
void GroupTileKernel::RowPv(int64_t r, int64_t n, uint64_t visible, const void* const* v_rows) {
  const ops::SimdKernels& simd = ops::Simd();
  const DType dt = p_.v.dtype;
  const float* s = s_ + r * kTileK;
  float* o = o_ + r * Dv_;
  float w[kTileK];
  const void* vis[kTileK];
  int64_t nv = 0;
  for (int64_t t = 0; t < n; ++t) {
    if (!(visible >> t & 1u)) continue;
    w[nv] = s[t];
    vis[nv++] = v_rows[t];
  }
  int64_t t4 = 0;
  for (; t4 + 4 <= nv; t4 += 4) simd.Axpy4(dt, o, w + t4, vis + t4, Dv_);
  for (; t4 < nv; ++t4) simd.Axpy(dt, o, w[t4], vis[t4], Dv_);
}

void GroupTileKernel::FullTilePv(int64_t j0, int64_t n, const void* const* v_rows) {
  const ops::SimdKernels& simd = ops::Simd();
  const DType dt = p_.v.dtype;
  auto key_ahead = [&](int64_t t, int64_t keys) { return std::min(j0 + t + keys, p_.k.seq - 1); };
  // Fully visible tile: o[rows, Dv] += P[rows, n] V[n, Dv] on the micro-tile, six rows per pass.
  // Many rows: V widened once into 16-dim panels (reading V in place re-fetches it per row group,
  // and its 1-2 KiB row stride maps a tile onto a few L1 sets). Few rows (one pass): V read in
  // place, and each 16-column block asks for its share of the V rows kPrefetchL2Keys ahead into L2,
  // so DRAM requests keep flowing while P.V computes instead of all leaving during the score pass
  // (bench/results/kernel_choices.md, "P.V prefetch of a full tile").
  const size_t es = DTypeSize(p_.v.dtype);
  const bool packed = path_ == TilePath::kPacked;  // (else kInPlace)
  if (packed) simd.pack_rows16(dt, v_rows[0], p_.v.stride_seq, n, Dv_, vp_);
  if (packed && wide_ != nullptr && n_q_ > 1) {  // (prefill: the wide tile, rows innermost as in WideScores)
    for (int64_t c0 = 0; c0 < Dv_; c0 += 32) {
      for (int64_t r0 = 0; r0 < rows_; r0 += ops::kWideTileRows) {
        const int mr = static_cast<int>(std::min<int64_t>(ops::kWideTileRows, rows_ - r0));
        const float* a[ops::kWideTileRows];
        for (int r = 0; r < ops::kWideTileRows; ++r) a[r] = s_ + (r0 + (r < mr ? r : 0)) * kTileK;
        wide_(a, vp_ + c0 * n, 16 * n, n, o_ + r0 * Dv_ + c0, Dv_, mr, static_cast<int>(std::min<int64_t>(32, Dv_ - c0)),
              true, {});
      }
    }
    return;
  }
  const int64_t col_blocks = (Dv_ + 15) / 16, v_share = (n + col_blocks - 1) / col_blocks;  // V rows per block
  LineFeed feed(RowsAhead(p_.v, j0, 0, packed && n_q_ == 1 ? n : 0));
  const int64_t calls = (rows_ + 5) / 6 * col_blocks, per_call = (feed.lines() + calls - 1) / calls;
  for (int64_t r0 = 0; r0 < rows_; r0 += 6) {
    const int mr = static_cast<int>(std::min<int64_t>(6, rows_ - r0));
    const float* a[6];
    for (int r = 0; r < 6; ++r) a[r] = s_ + (r0 + (r < mr ? r : 0)) * kTileK;
    for (int64_t c0 = 0; c0 < Dv_; c0 += 16) {
      const int nr = static_cast<int>(std::min<int64_t>(16, Dv_ - c0));
      if (packed) {
        feed.Issue(per_call);
        simd.gemm_tile(a, vp_ + c0 * n, n, o_ + r0 * Dv_ + c0, Dv_, mr, nr, true, nullptr, 0);
      } else {
        for (int64_t t = c0 / 16 * v_share; t < std::min(c0 / 16 * v_share + v_share, n); ++t)
          Prefetch<1>(p_.v.At(b_, g_, key_ahead(t, kPrefetchL2Keys)), Dv_ * es);
        simd.gemm_tile_b(dt, a, static_cast<const char*>(v_rows[0]) + c0 * es, p_.v.stride_seq, n, o_ + r0 * Dv_ + c0,
                         Dv_, mr, nr, true);
      }
    }
  }
}

void GroupTileKernel::WriteOutput() const {
  for (int64_t r = 0; r < rows_; ++r) {
    const int64_t h = g_ * group_ + r / n_q_, i = i0_ + r % n_q_;
    float* dst = p_.out.At(b_, h, i);
    const float* o = o_ + r * Dv_;
    // m_ -inf: no visible key, zeros; NaN: a poisoned row (l_ NaN too) stays NaN. A sink adds
    // exp(sink - m) to the denominator (exp(-inf) = 0 without one).
    const float sink = p_.sink ? p_.sink[h] : kNegInf;
    const float inv = m_[r] == kNegInf ? 0.0f : 1.0f / (l_[r] + std::exp(sink - m_[r]));
    for (int64_t d = 0; d < Dv_; ++d) dst[d] = o[d] * inv;
  }
}

void MergePartials(const float* const* o_parts, const float* m_parts, const float* l_parts, int n, int64_t Dv,
                   float sink, float* out) {
  float m_all = kNegInf;
  bool poisoned = false;  // some split met a non-finite score: the row is NaN
  for (int s = 0; s < n; ++s) {
    poisoned |= std::isnan(m_parts[s]);
    m_all = std::max(m_all, m_parts[s]);
  }
  std::fill(out, out + Dv, poisoned ? kNaN : 0.0f);
  if (poisoned || m_all == kNegInf) return;  // (no split saw a visible key: zeros)
  float l_all = 0;
  for (int s = 0; s < n; ++s) {
    if (m_parts[s] == kNegInf) continue;
    const float w = std::exp(m_parts[s] - m_all);
    l_all += w * l_parts[s];
    ops::Simd().axpy_f32(out, w, o_parts[s], Dv);
  }
  ops::Simd().scale(out, 1.0f / (l_all + std::exp(sink - m_all)), Dv);
}

}  // namespace tessera::attn
