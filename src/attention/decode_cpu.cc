// Decode: few queries, many keys. Work items are (batch row, KV group, key split); each split
// runs the shared tile engine over its key range and leaves an unnormalized softmax state, then
// a second pass merges the splits of each query row by log-sum-exp.
#include <algorithm>
#include <limits>

#include "attention/kernels.h"
#include "attention/tile_kernel.h"

namespace tessera::attn {
namespace {

constexpr int64_t kMaxSplits = 64;
// Work items per thread where KV groups are few. Each split starts with its K/V prefetch cold and
// adds a partial state to merge, so few splits win; 2 keeps some dynamic balance
// (bench/results/kernel_choices.md, "Decode splits per thread").
constexpr int kSplitsPerThread = 2;

// Splits per (batch row, KV group): kSplitsPerThread items per thread, never more than the key
// tiles available or kMaxSplits.
int64_t SplitCount(const AttentionParams& p, int num_threads) {
  const int64_t k_tiles = std::max<int64_t>(1, (p.k.seq + kTileK - 1) / kTileK);
  const int64_t groups = p.q.batch * p.k.heads;
  const int64_t wanted = (kSplitsPerThread * num_threads + groups - 1) / groups;
  return std::clamp<int64_t>(wanted, 1, std::min(k_tiles, kMaxSplits));
}

}  // namespace

size_t DecodeScratchBytes(const AttentionParams& p, int num_threads) {
  const int64_t splits = SplitCount(p, num_threads);
  const int64_t rows = (p.q.heads / p.k.heads) * p.q.seq;
  const int64_t items = p.q.batch * p.k.heads * splits;
  // One term per Take() in DecodeAttention, each rounded the same way.
  const int64_t k_tiles = (p.k.seq + kTileK - 1) / kTileK;
  return Arena::Bytes<RangeSummary>(p.q.batch) + Arena::Bytes<RangeSummary>(p.q.batch * k_tiles) +
         Arena::Bytes<float>(items * rows * p.v.dim) + 2 * Arena::Bytes<float>(items * rows) +
         Arena::Bytes<float>(num_threads * GroupTileKernel::ScratchFloats(p, rows));
}

void DecodeAttention(const AttentionParams& p, ThreadPool* pool, Arena& scratch) {
  const MaskSpec& m = p.mask;
  const int64_t B = p.q.batch, Hkv = p.k.heads, S_q = p.q.seq, S_kv = p.k.seq, Dv = p.v.dim;
  const int64_t group = p.q.heads / Hkv, rows = group * S_q;
  const int threads = pool ? pool->num_threads() : 1;
  const int64_t splits = SplitCount(p, threads);
  const int64_t items = B * Hkv * splits;

  // Range summaries once per call (not per KV head / split): q [B], k tiles [B, k_tiles].
  const int64_t k_tiles = (S_kv + kTileK - 1) / kTileK;
  RangeSummary* q_sum = scratch.Take<RangeSummary>(B);
  RangeSummary* k_sum = scratch.Take<RangeSummary>(B * k_tiles);
  SummarizeQueryBlocks(m, B, S_q, std::max<int64_t>(S_q, 1), q_sum);
  SummarizeKeyTiles(m, B, S_kv, kTileK, k_sum);

  // Partial states of every item: o [items, rows, Dv], m [items, rows], l [items, rows].
  float* part_o = scratch.Take<float>(items * rows * Dv);
  float* part_m = scratch.Take<float>(items * rows);
  float* part_l = scratch.Take<float>(items * rows);
  const int64_t per_thread = GroupTileKernel::ScratchFloats(p, rows);
  float* thread_scratch = scratch.Take<float>(threads * per_thread);  // [threads, per_thread]

  auto run_split = [&](int64_t item, int thread) {
    const int64_t split = item % splits, g = (item / splits) % Hkv, b = item / (splits * Hkv);
    GroupTileKernel kern(p, rows, thread_scratch + thread * per_thread);
    kern.Begin(b, g, 0, S_q);
    const RangeSummary& qs = q_sum[b];
    const int64_t valid = KvValid(m, b, S_kv);
    const int64_t tiles = (valid + kTileK - 1) / kTileK;
    const int64_t t0 = tiles * split / splits, t1 = tiles * (split + 1) / splits;
    for (int64_t kt = t0; kt < t1; ++kt) {
      const int64_t j0 = kt * kTileK, j1 = std::min(j0 + kTileK, valid);
      kern.ConsumeTile(j0, j1, ClassifyTile(m, qs, k_sum[b * k_tiles + kt], /*all_keys_valid=*/true));
    }
    std::copy(kern.o(), kern.o() + rows * Dv, part_o + item * rows * Dv);
    std::copy(kern.m(), kern.m() + rows, part_m + item * rows);
    std::copy(kern.l(), kern.l() + rows, part_l + item * rows);
  };

  // Merge: one work item per (batch row, KV group, row).
  auto merge = [&](int64_t idx, int) {
    const int64_t r = idx % rows, bg = idx / rows;  // bg = b * Hkv + g
    const int64_t b = bg / Hkv, g = bg % Hkv;
    const float* o_parts[kMaxSplits];
    float m_parts[kMaxSplits], l_parts[kMaxSplits];
    const int64_t h = g * group + r / S_q;
    float* out = p.out.At(b, h, r % S_q);
    for (int64_t s = 0; s < splits; ++s) {
      const int64_t item = bg * splits + s;
      o_parts[s] = part_o + (item * rows + r) * Dv;
      m_parts[s] = part_m[item * rows + r];
      l_parts[s] = part_l[item * rows + r];
    }
    MergePartials(o_parts, m_parts, l_parts, static_cast<int>(splits), Dv,
                  p.sink ? p.sink[h] : -std::numeric_limits<float>::infinity(), out);
  };

  if (pool) {
    pool->ParallelFor(items, run_split);
    pool->ParallelFor(B * Hkv * rows, merge);
  } else {
    for (int64_t i = 0; i < items; ++i) run_split(i, 0);
    for (int64_t i = 0; i < B * Hkv * rows; ++i) merge(i, 0);
  }
}

}  // namespace tessera::attn
