// The inner engine shared by the prefill and decode kernels: a block of query rows (all query
// heads of one KV group x a run of query positions) consumes key tiles with an online softmax.
// Each K/V tile is read once per KV group and used by every query row. From kPackedRows rows on,
// scores run on the GEMM micro-tile over a packed (widened, transposed) copy of the K tile and P.V
// of fully visible tiles over a packed copy of V, so bf16/f16 are widened once per tile; fewer rows
// (decode with small groups) read K and V in place, prefetched ahead of the DRAM stream.
// At precision bf16 q and the softmax weights are rounded to bf16 (AttentionPrecision); from
// kPackedRows rows on, where the CPU has AVX-512-BF16, the products then run on its bf16 dot
// product: scores from 16-row query panels against K read in place, P.V of 16-row panels against V
// read in place; on CPUs with AMX, on its tiles instead (ops/bf16_amx_attention.h).
#pragma once

#include <cstdint>

#include "attention/mask.h"
#include "ops/prefetch_rows.h"
#include "ops/simd.h"
#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"

namespace tessera::ops {
struct Bf16DotKernels;
}

namespace tessera::attn {

inline constexpr int64_t kTileK = 64;         // keys per tile
inline constexpr int64_t kRowsPerBlock = 64;  // target query rows (heads x positions) per block
inline constexpr int64_t kWideRowsPerBlock = 128;  // the same at f32 on the wide micro-tile (prefill)
inline constexpr int64_t kWideRowsPerFullBlock = 256;  // the same where every tile is fully visible (f32, bf16)
// From this many rows on, the K and V tiles are packed (widened once, laid out for the GEMM
// micro-tile); fewer rows read them in place, each element once.
inline constexpr int64_t kPackedRows = 4;

class GroupTileKernel {
 public:
  // Works in `scratch`, ScratchFloats(p, max_rows) floats (64-byte aligned) owned by the caller,
  // for at most `max_rows` query rows. Construction is free; no allocation happens here.
  GroupTileKernel(const AttentionParams& p, int64_t max_rows, float* scratch);
  ~GroupTileKernel();  // releases the AMX tile state where the panels used it
  GroupTileKernel(const GroupTileKernel&) = delete;
  GroupTileKernel& operator=(const GroupTileKernel&) = delete;
  static int64_t ScratchFloats(const AttentionParams& p, int64_t max_rows);

  // Loads queries [i0, i0 + n_q) of all query heads of KV group g in batch row b and resets the
  // softmax state. Row r is query head g*group + r / n_q at position i0 + r % n_q.
  void Begin(int64_t b, int64_t g, int64_t i0, int64_t n_q);
  // Consumes keys [j0, j1) (a tile, j1 - j0 <= kTileK) with the given classification.
  void ConsumeTile(int64_t j0, int64_t j1, TileClass cls);
  // Writes normalized rows to p.out, the row's sink in the denominator (zeros for rows that saw no
  // visible key; NaN for rows that met a non-finite score, docs/reliability.md).
  void WriteOutput() const;
  // Unnormalized state for a log-sum-exp merge: o [rows, Dv], m [rows], l [rows] (without the
  // sink); m is -inf for a row with no visible key yet and NaN (with l and o) for one that met a
  // non-finite score.
  const float* o() const { return o_; }
  const float* m() const { return m_; }
  const float* l() const { return l_; }
  int64_t rows() const { return rows_; }

 private:
  // How a block computes its tiles, fixed for the call by what no tile changes: the precision and
  // head dims (the bf16 dot-product kernels), the soft cap and a dense bias (which the fused dot path
  // does not apply), and the block's row count (packed or in place). Only the tile's class (full or
  // partly visible) is decided per tile.
  enum class TilePath {
    kDot,      // bf16 dot product, one 16-row panel at a time: scores, mask, key-major softmax, P.V
    kDotRows,  // bf16 dot-product scores turned into rows (a soft cap or a dense bias), row softmax, row P.V
    kPacked,   // f32 GEMM micro-tile over the packed K tile, and over the packed V tile in full tiles
    kInPlace,  // few rows: K and V read in place, prefetched ahead of the DRAM stream
  };
  static TilePath WidePath(const AttentionParams& p, const ops::Bf16DotKernels* dot);
  bool DotScores() const { return path_ == TilePath::kDot || path_ == TilePath::kDotRows; }

  ops::PrefetchRows RowsAhead(const HeadsView& view, int64_t j0, int64_t t, int64_t count) const;
  // Scores.
  void PanelScores(int64_t r0, int64_t j0, int64_t n, const void* const* k_rows);
  void DotRowScores(int64_t j0, int64_t n, const void* const* k_rows);
  void PackedScores(int64_t j0, int64_t n, const void* const* k_rows);
  void WideScores(int64_t n);
  void InPlaceScores(int64_t j0, int64_t n, TileClass cls, const void* const* k_rows);
  // The fused dot path (kDot).
  void ConsumeTileDot(int64_t j0, int64_t n, TileClass cls, const void* const* k_rows, const void* const* v_rows);
  uint64_t MaskPanel(int64_t r0, int mr, int64_t j0, int64_t n, uint16_t* seen_by);
  uint64_t KeysApart(int mr, int64_t n, const uint16_t* seen_by, const void* const* v_rows, uint64_t* v_checked,
                     uint64_t* v_bad) const;
  void PvApart(int64_t r0, int mr, uint64_t apart, const uint16_t* seen_by, const void* const* v_rows);
  // Mask and softmax of the row paths, and their P.V.
  void SoftmaxRows(int64_t j0, int64_t n, TileClass cls, const void* const* v_rows);
  bool PrepareRow(int64_t r, int64_t j0, int64_t n, TileClass cls, uint64_t* visible);
  bool SoftmaxStep(int64_t r, int64_t n, TileClass cls);
  void PoisonRow(int64_t r);
  void RowPv(int64_t r, int64_t n, uint64_t visible, const void* const* v_rows);
  void FullTilePv(int64_t j0, int64_t n, const void* const* v_rows);

  const AttentionParams& p_;
  int64_t group_, D_, Dv_;
  int64_t b_ = 0, g_ = 0, i0_ = 0, n_q_ = 0, rows_ = 0, valid_ = 0;
  float* q_;   // [max_rows, D]  queries times scale
  float* s_;   // [max_rows, kTileK] scores of the current tile, then its softmax weights
  float* kp_ = nullptr;  // [kTileK / 16][D][16] the K tile as f32 panels of 16 keys (rows >= kPackedRows)
  float* vp_ = nullptr;  // [ceil(Dv / 16)][kTileK][16] the V tile as f32 panels of 16 dims (same)
  // Precision bf16 on the dot-product kernels (null: f32 kernels, on rounded values at bf16).
  bool bf16_ = false;
  const ops::Bf16DotKernels* dot_ = nullptr;
  // The dot path's panels on AMX tiles (ops/bf16_amx_attention.h), and their scratch; null: off.
  void* amx_ = nullptr;
  TilePath wide_path_ = TilePath::kPacked;  // the path of blocks of kPackedRows rows or more
  TilePath path_ = TilePath::kInPlace;      // this block's path (Begin)
  // The wide f32 micro-tile for packed prefill blocks (null: the 6 x 16 gemm_tile).
  ops::GemmTileWideFn wide_ = nullptr;
  ops::ExpSubSumFn exp_sub_sum_ = ops::ExpSubSumWide();  // the softmax numerator (16 lanes on AVX-512)
  int64_t pairs_ = 0;          // D / 2
  uint32_t* qw_ = nullptr;     // [ceil(max_rows / 16)][pairs][16] bf16 pairs of q (unscaled), 16-row panels
  float* st_ = nullptr;        // [kTileK][16] scores of one panel, key-major
  uint32_t* pw_ = nullptr;     // [kTileK / 2][16] one panel's softmax weights as bf16 pairs, key-major
  float* o_;   // [max_rows, Dv] unnormalized output accumulator
  float* m_;   // [max_rows]     running max
  float* l_;   // [max_rows]     running denominator
};

// Merges partial softmax states (from disjoint key ranges) of one row: o_s [n][Dv], m_s[n], l_s[n].
// A NaN m (a split that met a non-finite score) makes the row NaN. `sink` is the row's sink logit
// (-inf: none), added to the merged denominator once.
void MergePartials(const float* const* o_parts, const float* m_parts, const float* l_parts, int n, int64_t Dv,
                   float sink, float* out);

}  // namespace tessera::attn
