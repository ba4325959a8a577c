// Tile classification against brute force over all pairs of a tile: kEmpty must mean no visible
// pair and kFull must mean every pair visible (soundness, always); for contiguous positions
// without blocks the classification must also be exact (kPartial only for mixed tiles).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "attention/mask.h"

namespace tessera::attn {
namespace {

struct Tile {
  std::vector<int32_t> pos, blk;
};

int CountVisible(const MaskSpec& m, const Tile& q, const Tile& k) {
  int n = 0;
  for (size_t i = 0; i < q.pos.size(); ++i)
    for (size_t j = 0; j < k.pos.size(); ++j) n += StructuredVisible(m, q.pos[i], q.blk[i], k.pos[j], k.blk[j]);
  return n;
}

TEST(TileClass, SoundOnRandomTiles) {
  std::mt19937 rng(42);
  auto u = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int empty = 0, full = 0, partial = 0;
  for (int trial = 0; trial < 200000; ++trial) {
    MaskSpec m;
    m.causal = u(0, 4) != 0;
    m.window_left = u(0, 2) ? u(0, 12) : -1;
    m.window_right = u(0, 2) ? u(0, 12) : -1;
    m.blocks_ignore_window = u(0, 2) == 0;
    Tile q, k;
    const int nq = u(1, 6), nk = u(1, 6), base = u(0, 20);
    const int max_blk = u(0, 2);  // 0: blocks {-1, 0}; larger: several images
    for (int i = 0; i < nq; ++i) q.pos.push_back(base + u(0, 12)), q.blk.push_back(u(-1, max_blk));
    for (int j = 0; j < nk; ++j) k.pos.push_back(base + u(0, 12)), k.blk.push_back(u(-1, max_blk));
    if (u(0, 3) == 0) std::fill(q.blk.begin(), q.blk.end(), u(-1, max_blk));
    if (u(0, 3) == 0) std::fill(k.blk.begin(), k.blk.end(), u(-1, max_blk));
    const bool use_blocks = u(0, 2) != 0;
    if (!use_blocks) std::fill(q.blk.begin(), q.blk.end(), -1), std::fill(k.blk.begin(), k.blk.end(), -1);
    const RangeSummary qs = Summarize(q.pos.data(), use_blocks ? q.blk.data() : nullptr, nq);
    const RangeSummary ks = Summarize(k.pos.data(), use_blocks ? k.blk.data() : nullptr, nk);
    const TileClass cls = ClassifyTile(m, qs, ks, true);
    const int visible = CountVisible(m, q, k);
    if (cls == TileClass::kEmpty) {
      ++empty;
      ASSERT_EQ(visible, 0) << "trial " << trial;
    } else if (cls == TileClass::kFull) {
      ++full;
      ASSERT_EQ(visible, nq * nk) << "trial " << trial;
    } else {
      ++partial;
    }
  }
  // The random tiles must exercise every class, or the assertions above prove little.
  EXPECT_GT(empty, 1000);
  EXPECT_GT(full, 1000);
  EXPECT_GT(partial, 1000);
}

TEST(TileClass, ExactForContiguousPositionsWithoutBlocks) {
  std::mt19937 rng(7);
  auto u = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 100000; ++trial) {
    MaskSpec m;
    m.causal = u(0, 3) != 0;
    m.window_left = u(0, 1) ? u(0, 40) : -1;
    m.window_right = m.causal ? (u(0, 1) ? 0 : -1) : (u(0, 1) ? u(0, 40) : -1);
    Tile q, k;
    const int nq = u(1, 16), nk = u(1, 16), q0 = u(0, 60), k0 = u(0, 60);
    for (int i = 0; i < nq; ++i) q.pos.push_back(q0 + i), q.blk.push_back(-1);
    for (int j = 0; j < nk; ++j) k.pos.push_back(k0 + j), k.blk.push_back(-1);
    const TileClass cls = ClassifyTile(m, Summarize(q.pos.data(), nullptr, nq), Summarize(k.pos.data(), nullptr, nk), true);
    const int visible = CountVisible(m, q, k);
    const TileClass want = visible == 0 ? TileClass::kEmpty : visible == nq * nk ? TileClass::kFull : TileClass::kPartial;
    ASSERT_EQ(static_cast<int>(cls), static_cast<int>(want)) << "trial " << trial;
  }
}

TEST(TileClass, DenseMaskOrPaddingNeverFull) {
  MaskSpec m;
  m.causal = false;
  const int32_t pos[2] = {0, 1};
  const RangeSummary s = Summarize(pos, nullptr, 2);
  EXPECT_EQ(ClassifyTile(m, s, s, true), TileClass::kFull);
  EXPECT_EQ(ClassifyTile(m, s, s, false), TileClass::kPartial);
  float bias = 0;
  m.dense.kind = DenseMask::Kind::kAdditive;
  m.dense.data = &bias;
  EXPECT_EQ(ClassifyTile(m, s, s, true), TileClass::kPartial);
}

}  // namespace
}  // namespace tessera::attn
