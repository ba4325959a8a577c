// Mask evaluation shared by every kernel: the per-element predicate (the normative definition of
// docs/attention.md) and the tile classification that lets fast kernels skip or simplify tiles.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "tessera/attention.h"

namespace tessera::attn {

inline int64_t KvValid(const MaskSpec& m, int64_t b, int64_t s_kv) {
  return m.kv_valid ? m.kv_valid[b] : s_kv;
}

// Key slots query i of batch row b may read: [0, kv_valid[b]), or with AttentionParams::rows_as_steps
// only those its cache held once the query's own token was appended.
inline int64_t QueryKvValid(const AttentionParams& p, int64_t b, int64_t i) {
  const int64_t valid = KvValid(p.mask, b, p.k.seq);
  if (!p.rows_as_steps) return valid;
  return std::clamp<int64_t>(static_cast<int64_t>(p.mask.q_pos[b * p.q.seq + i]) + 1, 0, valid);
}

// Structured part of the predicate (everything but the dense mask) for key j of batch row b,
// given the query's position and block. Key validity is checked by the caller.
inline bool StructuredVisible(const MaskSpec& m, int32_t qp, int32_t qb, int32_t kp, int32_t kb) {
  const int64_t d = static_cast<int64_t>(qp) - kp;  // > 0: key before the query
  const bool in_window = (m.window_left < 0 || d <= m.window_left) && (m.window_right < 0 || -d <= m.window_right);
  const bool causal_ok = !m.causal || d >= 0;
  const bool same_block = qb >= 0 && qb == kb;
  if (m.blocks_ignore_window) return (in_window && causal_ok) || same_block;
  return in_window && (causal_ok || same_block);
}

// Dense-mask contribution for (b, h, i, j): the additive value, or -inf where masked.
inline float DenseTerm(const DenseMask& dm, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t off = b * dm.stride_batch + h * dm.stride_head + i * dm.stride_q + j * dm.stride_k;
  if (dm.kind == DenseMask::Kind::kAdditive) return static_cast<const float*>(dm.data)[off];
  if (dm.kind == DenseMask::Kind::kBool)
    return static_cast<const uint8_t*>(dm.data)[off] ? 0.0f : -std::numeric_limits<float>::infinity();
  return 0.0f;
}

// Summary of a run of tokens (a query tile or a key tile) used to classify tiles by arithmetic.
struct RangeSummary {
  int32_t pos_min = std::numeric_limits<int32_t>::max();
  int32_t pos_max = std::numeric_limits<int32_t>::min();
  int32_t blk_min = std::numeric_limits<int32_t>::max();  // over ids >= 0
  int32_t blk_max = -1;                                   // over ids >= 0; -1 = no block member
  bool all_in_one_block = false;                          // every token has the same id >= 0
  bool empty() const { return pos_min > pos_max; }
};

inline RangeSummary Summarize(const int32_t* pos, const int32_t* blk, int64_t n) {
  RangeSummary s;
  bool any_unblocked = false;
  for (int64_t i = 0; i < n; ++i) {
    s.pos_min = std::min(s.pos_min, pos[i]);
    s.pos_max = std::max(s.pos_max, pos[i]);
    const int32_t id = blk ? blk[i] : -1;
    if (id >= 0) {
      s.blk_min = std::min(s.blk_min, id);
      s.blk_max = std::max(s.blk_max, id);
    } else {
      any_unblocked = true;
    }
  }
  s.all_in_one_block = n > 0 && !any_unblocked && s.blk_min == s.blk_max;
  return s;
}

// Summaries of each row's query blocks of `n_block` queries: out [B, ceil(S_q / n_block)].
inline void SummarizeQueryBlocks(const MaskSpec& m, int64_t B, int64_t S_q, int64_t n_block, RangeSummary* out) {
  const int64_t blocks = (S_q + n_block - 1) / n_block;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t qb = 0; qb < blocks; ++qb) {
      const int64_t i0 = qb * n_block, n = std::min(n_block, S_q - i0);
      out[b * blocks + qb] = Summarize(m.q_pos + b * S_q + i0, m.q_block ? m.q_block + b * S_q + i0 : nullptr, n);
    }
}

// Summaries of each row's key tiles of `tile` keys, over valid keys only: out [B, ceil(S_kv / tile)].
// O(S_kv) per row, computed once per attention call and shared by every KV head and query block.
inline void SummarizeKeyTiles(const MaskSpec& m, int64_t B, int64_t S_kv, int64_t tile, RangeSummary* out) {
  const int64_t tiles = (S_kv + tile - 1) / tile;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t valid = KvValid(m, b, S_kv);
    for (int64_t kt = 0; kt < tiles; ++kt) {
      const int64_t j0 = kt * tile, n = std::clamp<int64_t>(valid - j0, 0, tile);
      out[b * tiles + kt] = Summarize(m.k_pos + b * S_kv + j0, m.k_block ? m.k_block + b * S_kv + j0 : nullptr, n);
    }
  }
}

enum class TileClass { kEmpty, kFull, kPartial };

// Classifies all (query, key) pairs of a tile. `k` summarizes only the tile's valid keys and
// `all_keys_valid` says whether the tile has no padding slot. kEmpty: no pair is visible.
// kFull: every pair is visible with no per-element work. Otherwise kPartial.
inline TileClass ClassifyTile(const MaskSpec& m, const RangeSummary& q, const RangeSummary& k,
                              bool all_keys_valid) {
  if (k.empty() || q.empty()) return TileClass::kEmpty;
  // "possible": some pair may satisfy the term; "always": every pair does.
  const bool window_possible =
      (m.window_left < 0 || static_cast<int64_t>(q.pos_min) - k.pos_max <= m.window_left) &&
      (m.window_right < 0 || static_cast<int64_t>(k.pos_min) - q.pos_max <= m.window_right);
  const bool causal_possible = !m.causal || k.pos_min <= q.pos_max;
  const bool block_possible = q.blk_max >= 0 && k.blk_max >= 0 && q.blk_min <= k.blk_max && k.blk_min <= q.blk_max;
  const bool possible = m.blocks_ignore_window ? (window_possible && causal_possible) || block_possible
                                               : window_possible && (causal_possible || block_possible);
  if (!possible) return TileClass::kEmpty;
  if (m.dense.present() || !all_keys_valid) return TileClass::kPartial;
  const bool window_always =
      (m.window_left < 0 || static_cast<int64_t>(q.pos_max) - k.pos_min <= m.window_left) &&
      (m.window_right < 0 || static_cast<int64_t>(k.pos_max) - q.pos_min <= m.window_right);
  const bool causal_always = !m.causal || k.pos_max <= q.pos_min;
  const bool block_always = q.all_in_one_block && k.all_in_one_block && q.blk_min == k.blk_min;
  const bool always = m.blocks_ignore_window ? (window_always && causal_always) || block_always
                                             : window_always && (causal_always || block_always);
  return always ? TileClass::kFull : TileClass::kPartial;
}

}  // namespace tessera::attn
