// Prefill: work items are (batch row, KV group, query block). Each item walks the key tiles of
// its row, skipping tiles the range arithmetic proves empty, so cost follows visible pairs.
#include <algorithm>
#include <vector>

#include "attention/kernels.h"
#include "attention/tile_kernel.h"

namespace tessera::attn {
namespace {

struct Plan {
  int64_t group, n_q_block, q_blocks, k_tiles;
};

Plan MakePlan(const AttentionParams& p) {
  Plan plan;
  plan.group = p.q.heads / p.k.heads;
  // With the wide f32 micro-tile, blocks of twice the rows pack each K/V tile half as often (four
  // times the rows: more partly visible tiles). Where no tile is partly visible (no causal order,
  // window or dense mask: the vision towers), four times the rows pack a quarter as often
  // (bench/results/kernel_choices.md, "The wide f32 tile in prefill").
  // At precision bf16 the fully visible blocks are as tall on the same CPUs: an AMX block packs
  // each V tile once for all its panels (bench/results/vision.md, "Taller attention blocks at
  // bf16"). Only choices fixed for the process: the caller sizes the scratch by this plan.
  const bool wide_cpu = ops::GemmTileWide() != nullptr, wide = p.precision == AttentionPrecision::kF32 && wide_cpu;
  const MaskSpec& m = p.mask;
  const bool all_visible = !m.causal && m.window_left < 0 && m.window_right < 0 && !m.dense.present();
  const int64_t rows = all_visible && wide_cpu ? kWideRowsPerFullBlock : wide ? kWideRowsPerBlock : kRowsPerBlock;
  plan.n_q_block = std::clamp<int64_t>(rows / plan.group, 1, std::max<int64_t>(1, p.q.seq));
  plan.q_blocks = (p.q.seq + plan.n_q_block - 1) / plan.n_q_block;
  plan.k_tiles = (p.k.seq + kTileK - 1) / kTileK;
  return plan;
}

}  // namespace

size_t PrefillScratchBytes(const AttentionParams& p, int num_threads) {
  const Plan plan = MakePlan(p);
  const int64_t B = p.q.batch;
  // One term per Take() in PrefillAttention, each rounded the same way.
  return Arena::Bytes<RangeSummary>(B * plan.q_blocks) + Arena::Bytes<RangeSummary>(B * plan.k_tiles) +
         Arena::Bytes<float>(num_threads * GroupTileKernel::ScratchFloats(p, plan.group * plan.n_q_block));
}

void PrefillAttention(const AttentionParams& p, ThreadPool* pool, Arena& scratch) {
  const Plan plan = MakePlan(p);
  const MaskSpec& m = p.mask;
  const int64_t B = p.q.batch, Hkv = p.k.heads, S_q = p.q.seq, S_kv = p.k.seq;
  const int threads = pool ? pool->num_threads() : 1;

  // Range summaries, computed once per call: O(S_q + S_kv), never O(S_q * S_kv).
  RangeSummary* q_sum = scratch.Take<RangeSummary>(B * plan.q_blocks);  // [B, q_blocks]
  RangeSummary* k_sum = scratch.Take<RangeSummary>(B * plan.k_tiles);   // [B, k_tiles], valid keys only
  SummarizeQueryBlocks(m, B, S_q, plan.n_q_block, q_sum);
  SummarizeKeyTiles(m, B, S_kv, kTileK, k_sum);

  const int64_t max_rows = plan.group * plan.n_q_block;
  const int64_t per_thread = GroupTileKernel::ScratchFloats(p, max_rows);
  float* thread_scratch = scratch.Take<float>(threads * per_thread);  // [threads, per_thread]

  auto run = [&](int64_t item, int thread) {
    const int64_t qb = item % plan.q_blocks, g = (item / plan.q_blocks) % Hkv, b = item / (plan.q_blocks * Hkv);
    const int64_t i0 = qb * plan.n_q_block, n_q = std::min(plan.n_q_block, S_q - i0);
    GroupTileKernel kern(p, max_rows, thread_scratch + thread * per_thread);
    kern.Begin(b, g, i0, n_q);
    const int64_t valid = KvValid(m, b, S_kv);
    const RangeSummary& qs = q_sum[b * plan.q_blocks + qb];
    for (int64_t kt = 0; kt * kTileK < valid; ++kt) {
      const int64_t j0 = kt * kTileK, j1 = std::min(j0 + kTileK, valid);
      kern.ConsumeTile(j0, j1, ClassifyTile(m, qs, k_sum[b * plan.k_tiles + kt], /*all_keys_valid=*/true));
    }
    kern.WriteOutput();
  };
  const int64_t items = B * Hkv * plan.q_blocks;
  if (pool) {
    pool->ParallelFor(items, run);
  } else {
    for (int64_t i = 0; i < items; ++i) run(i, 0);
  }
}

}  // namespace tessera::attn

namespace tessera {

TileCensus CensusPrefillTiles(const AttentionParams& p) {
  using namespace attn;
  const Plan plan = MakePlan(p);
  const MaskSpec& m = p.mask;
  const int64_t B = p.q.batch;
  // A diagnostic, outside the forward pass: plain vectors are fine here.
  std::vector<RangeSummary> q_sum(B * plan.q_blocks), k_sum(B * plan.k_tiles);
  SummarizeQueryBlocks(m, B, p.q.seq, plan.n_q_block, q_sum.data());
  SummarizeKeyTiles(m, B, p.k.seq, kTileK, k_sum.data());
  TileCensus census;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t qb = 0; qb < plan.q_blocks; ++qb) {
      for (int64_t kt = 0; kt < plan.k_tiles; ++kt) {
        switch (ClassifyTile(m, q_sum[b * plan.q_blocks + qb], k_sum[b * plan.k_tiles + kt], true)) {
          case TileClass::kEmpty: ++census.empty; break;
          case TileClass::kFull: ++census.full; break;
          case TileClass::kPartial: ++census.partial; break;
        }
      }
    }
  }
  return census;
}

}  // namespace tessera
