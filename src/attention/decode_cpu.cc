// Decode: few queries, many keys. Work items are (batch row, KV group, query position, key split);
// each split runs the shared tile engine over its key range and leaves an unnormalized softmax
// state, then a second pass merges the splits of each query row by log-sum-exp.
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
// Partial-state floats below which the merge runs on the calling thread: a one-token step of a
// few heads merges a few thousand floats, less work than handing it to the pool and waiting.
constexpr int64_t kParallelMergeFloats = 64 * 1024;

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
  const int64_t group = p.q.heads / p.k.heads;
  const int64_t items = p.q.batch * p.k.heads * p.q.seq * splits;
  // One term per Take() in DecodeAttention, each rounded the same way.
  const int64_t k_tiles = (p.k.seq + kTileK - 1) / kTileK;
  return Arena::Bytes<RangeSummary>(p.q.batch * p.q.seq) + Arena::Bytes<RangeSummary>(p.q.batch * k_tiles) +
         Arena::Bytes<float>(items * group * p.v.dim) + 2 * Arena::Bytes<float>(items * group) +
         Arena::Bytes<float>(num_threads * GroupTileKernel::ScratchFloats(p, group));
}

// Each query position is computed on its own, as in a one-query step, so that rows_as_steps
// holds: a split's key tiles depend only on the keys its query reads (QueryKvValid) and on the
// split count, which depends on the shapes and thread count alone.
void DecodeAttention(const AttentionParams& p, ThreadPool* pool, Arena& scratch) {
  const MaskSpec& m = p.mask;
  const int64_t B = p.q.batch, Hkv = p.k.heads, S_q = p.q.seq, S_kv = p.k.seq, Dv = p.v.dim;
  const int64_t group = p.q.heads / Hkv;
  const int threads = pool ? pool->num_threads() : 1;
  const int64_t splits = SplitCount(p, threads);
  const int64_t items = B * Hkv * S_q * splits;

  // Range summaries once per call (not per KV head / split): q [B, S_q], k tiles [B, k_tiles].
  const int64_t k_tiles = (S_kv + kTileK - 1) / kTileK;
  RangeSummary* q_sum = scratch.Take<RangeSummary>(B * S_q);
  RangeSummary* k_sum = scratch.Take<RangeSummary>(B * k_tiles);
  SummarizeQueryBlocks(m, B, S_q, 1, q_sum);
  SummarizeKeyTiles(m, B, S_kv, kTileK, k_sum);

  // Partial states of every item: o [items, group, Dv], m [items, group], l [items, group].
  float* part_o = scratch.Take<float>(items * group * Dv);
  float* part_m = scratch.Take<float>(items * group);
  float* part_l = scratch.Take<float>(items * group);
  const int64_t per_thread = GroupTileKernel::ScratchFloats(p, group);
  float* thread_scratch = scratch.Take<float>(threads * per_thread);  // [threads, per_thread]

  // item = ((b * Hkv + g) * S_q + i) * splits + split
  auto run_split = [&](int64_t item, int thread) {
    const int64_t split = item % splits, bgi = item / splits;
    const int64_t i = bgi % S_q, g = (bgi / S_q) % Hkv, b = bgi / (S_q * Hkv);
    GroupTileKernel kern(p, group, thread_scratch + thread * per_thread);
    kern.Begin(b, g, i, 1);
    const RangeSummary& qs = q_sum[b * S_q + i];
    const int64_t all_valid = KvValid(m, b, S_kv), valid = QueryKvValid(p, b, i);
    const int64_t tiles = (valid + kTileK - 1) / kTileK;
    const int64_t t0 = tiles * split / splits, t1 = tiles * (split + 1) / splits;
    for (int64_t kt = t0; kt < t1; ++kt) {
      const int64_t j0 = kt * kTileK, j1 = std::min(j0 + kTileK, valid);
      // A tile cut short by this query's own key count has its own summary.
      const RangeSummary ks =
          j1 < std::min(j0 + kTileK, all_valid)
              ? Summarize(m.k_pos + b * S_kv + j0, m.k_block ? m.k_block + b * S_kv + j0 : nullptr, j1 - j0)
              : k_sum[b * k_tiles + kt];
      kern.ConsumeTile(j0, j1, ClassifyTile(m, qs, ks, /*all_keys_valid=*/true));
    }
    std::copy(kern.o(), kern.o() + group * Dv, part_o + item * group * Dv);
    std::copy(kern.m(), kern.m() + group, part_m + item * group);
    std::copy(kern.l(), kern.l() + group, part_l + item * group);
  };

  // Merge: one work item per (batch row, KV group, query position, head of the group).
  auto merge = [&](int64_t idx, int) {
    const int64_t r = idx % group, bgi = idx / group;  // bgi = (b * Hkv + g) * S_q + i
    const int64_t i = bgi % S_q, g = (bgi / S_q) % Hkv, b = bgi / (S_q * Hkv);
    const float* o_parts[kMaxSplits];
    float m_parts[kMaxSplits], l_parts[kMaxSplits];
    const int64_t h = g * group + r;
    for (int64_t s = 0; s < splits; ++s) {
      const int64_t item = bgi * splits + s;
      o_parts[s] = part_o + (item * group + r) * Dv;
      m_parts[s] = part_m[item * group + r];
      l_parts[s] = part_l[item * group + r];
    }
    MergePartials(o_parts, m_parts, l_parts, static_cast<int>(splits), Dv,
                  p.sink ? p.sink[h] : -std::numeric_limits<float>::infinity(), p.out.At(b, h, i));
  };

  if (pool) {
    pool->ParallelFor(items, run_split);
  } else {
    for (int64_t i = 0; i < items; ++i) run_split(i, 0);
  }
  const int64_t rows = B * Hkv * S_q * group;
  if (pool && rows * splits * Dv >= kParallelMergeFloats) {
    pool->ParallelFor(rows, merge);
  } else {
    for (int64_t i = 0; i < rows; ++i) merge(i, 0);
  }
}

}  // namespace tessera::attn
