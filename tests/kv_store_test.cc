// KV stores: ring vs dense equivalence under the sliding-window mask (bit for bit with the
// reference kernel, within f32 tolerance with the fast kernels), rewind exactness, bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"
#include "tessera/kv/concat_store.h"
#include "tessera/kv/dense_store.h"
#include "tessera/kv/external_store.h"
#include "tessera/kv/ring_store.h"

namespace tessera::kv {
namespace {

// One append for every row: S_new tokens (row b uses the first count[b]), with Q for them.
struct Chunk {
  int64_t S = 0;
  std::vector<float> k, v, q;             // [B, Hkv, S, D], [B, Hkv, S, Dv], [B, Hq, S, D]
  std::vector<int32_t> pos, count, blk;   // [B, S], [B], [B, S]
  KvAppend Append(const KvGeometry& g) const {
    KvAppend a;
    a.k = HeadsView::Dense(k.data(), DType::kF32, g.batch, g.kv_heads, S, g.head_dim);
    a.v = HeadsView::Dense(v.data(), DType::kF32, g.batch, g.kv_heads, S, g.v_head_dim);
    a.pos = pos.data();
    a.count = count.data();
    a.block = blk.data();
    return a;
  }
};

Chunk MakeChunk(std::mt19937& rng, const KvGeometry& g, int64_t hq, const std::vector<int64_t>& next_pos,
                const std::vector<int64_t>& counts, bool image) {
  std::normal_distribution<float> nd;
  Chunk c;
  for (int64_t n : counts) c.S = std::max(c.S, n);
  const int64_t B = g.batch, S = c.S;
  c.k.resize(B * g.kv_heads * S * g.head_dim);
  c.v.resize(B * g.kv_heads * S * g.v_head_dim);
  c.q.resize(B * hq * S * g.head_dim);
  for (auto* x : {&c.k, &c.v, &c.q})
    for (float& f : *x) f = nd(rng);
  c.pos.assign(B * S, 0);
  c.blk.assign(B * S, -1);
  c.count.assign(counts.begin(), counts.begin() + B);  // (not resize: gcc 12 sees a negative size)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < S; ++i) c.pos[b * S + i] = static_cast<int32_t>(next_pos[b] + i);
    // An image block strictly inside the chunk (blocks are never split across chunks).
    if (image && counts[b] >= 4)
      for (int64_t i = 1; i < counts[b] - 1; ++i) c.blk[b * S + i] = static_cast<int32_t>(next_pos[b]);
  }
  return c;
}

// Attention of the chunk's queries over a store's view with the HF sliding-window mask.
std::vector<float> Attend(const KvStore& store, const Chunk& c, int64_t hq, int64_t window, AttentionKernel kernel) {
  const KvView view = store.View();
  const int64_t B = view.k.batch;
  std::vector<float> out(B * hq * c.S * view.v.dim);
  AttentionParams p;
  p.q = HeadsView::Dense(c.q.data(), DType::kF32, B, hq, c.S, view.k.dim);
  p.k = view.k;
  p.v = view.v;
  p.out = OutView::Dense(out.data(), B, hq, c.S, view.v.dim);
  p.mask.q_pos = c.pos.data();
  p.mask.k_pos = view.k_pos;
  p.mask.kv_valid = view.kv_valid;
  p.mask.causal = true;
  p.mask.window_left = static_cast<int32_t>(window - 1);
  p.mask.window_right = -1;  // HF's window only limits keys before the query (blocks may look ahead)
  p.mask.q_block = c.blk.data();
  p.mask.k_block = view.k_block;
  p.scale = 0.125f;
  Arena scratch;
  ThreadPool pool(2);
  AttentionContext ctx{&pool, &scratch};
  Status st = Attention(p, ctx, kernel);
  EXPECT_TRUE(st.ok()) << st.message();
  // Rows past count[b] are padding queries: zero them so both stores compare equal there.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = c.count[b]; i < c.S; ++i)
        std::fill_n(out.data() + ((b * hq + h) * c.S + i) * view.v.dim, view.v.dim, 0.0f);
  return out;
}

TEST(RingStore, EqualsDenseUnderSlidingWindow) {
  std::mt19937 rng(123);
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t window = std::uniform_int_distribution<int64_t>(1, 40)(rng);
    const int64_t max_chunk = std::uniform_int_distribution<int64_t>(1, 24)(rng);
    const KvGeometry g{2, 2, 16, 8, static_cast<DType>(trial % 3)};
    const int64_t hq = 4;
    DenseStore dense(g, 400);
    RingStore ring(g, window, max_chunk);
    std::vector<int64_t> next_pos = {0, 5};  // rows start at different positions
    int64_t appended = 0;
    while (appended < 300) {
      const bool prefill = std::bernoulli_distribution(0.4)(rng);
      std::vector<int64_t> counts(2);
      for (auto& n : counts) n = prefill ? std::uniform_int_distribution<int64_t>(0, max_chunk)(rng) : 1;
      const Chunk c = MakeChunk(rng, g, hq, next_pos, counts, prefill);
      ASSERT_TRUE(dense.Append(c.Append(g)).ok());
      ASSERT_TRUE(ring.Append(c.Append(g)).ok());
      if (c.S == 0) continue;  // nothing to attend with
      const std::vector<float> want = Attend(dense, c, hq, window, AttentionKernel::kReference);
      const std::vector<float> got = Attend(ring, c, hq, window, AttentionKernel::kReference);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4))
          << "trial " << trial << " window " << window << " max_chunk " << max_chunk << " after " << appended;
      // The fast kernels on the ring agree with the reference within f32 tolerance.
      const std::vector<float> fast = Attend(ring, c, hq, window, AttentionKernel::kAuto);
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(fast[i], want[i], 1e-4 + 1e-4 * std::fabs(want[i]));
      for (int b = 0; b < 2; ++b) next_pos[b] += counts[b];
      appended += std::max(counts[0], counts[1]);
    }
    EXPECT_LT(ring.capacity(), dense.capacity());
    EXPECT_EQ(ring.capacity(), window - 1 + max_chunk);
  }
}

TEST(RingStore, RewindThenReappendEqualsNeverAppended) {
  std::mt19937 rng(9);
  const KvGeometry g{1, 1, 8, 8, DType::kF32};
  const int64_t window = 6, max_chunk = 4, hq = 2;  // capacity 9
  // Token t (0..23) as a single-token chunk; `a` gets them in chunks of 3, `b` one by one.
  std::vector<Chunk> tokens;
  for (int64_t t = 0; t < 24; ++t) tokens.push_back(MakeChunk(rng, g, hq, {t}, {1}, false));
  auto chunk_of_three = [&](int64_t first) {
    Chunk c = MakeChunk(rng, g, hq, {first}, {3}, false);
    for (int64_t i = 0; i < 3; ++i) {
      std::memcpy(c.k.data() + i * 8, tokens[first + i].k.data(), 8 * 4);
      std::memcpy(c.v.data() + i * 8, tokens[first + i].v.data(), 8 * 4);
    }
    return c;
  };
  for (int64_t drop = 0; drop <= 7; ++drop) {
    RingStore a(g, window, max_chunk), b(g, window, max_chunk);
    for (int64_t first = 0; first < 24; first += 3) ASSERT_TRUE(a.Append(chunk_of_three(first).Append(g)).ok());
    for (const Chunk& t : tokens) ASSERT_TRUE(b.Append(t.Append(g)).ok());
    Status st = a.Rewind(0, drop);
    // The ring (9 slots) holds tokens 15..23; after dropping `drop`, the next query needs the
    // window - 1 = 5 tokens before position 24 - drop.
    const bool possible = 24 - drop - (window - 1) >= 24 - a.capacity();
    ASSERT_EQ(st.ok(), possible) << "drop " << drop << ": " << st.message();
    if (!possible) {
      EXPECT_NE(st.message().find("overwritten"), std::string::npos) << st.message();
      EXPECT_EQ(a.write_pos(0), 24);  // refused: unchanged
      continue;
    }
    for (int64_t t = 24 - drop; t < 24; ++t) ASSERT_TRUE(a.Append(tokens[t].Append(g)).ok());
    const Chunk probe = MakeChunk(rng, g, hq, {24}, {1}, false);
    ASSERT_TRUE(a.Append(probe.Append(g)).ok());
    ASSERT_TRUE(b.Append(probe.Append(g)).ok());
    const std::vector<float> wa = Attend(a, probe, hq, window, AttentionKernel::kReference);
    const std::vector<float> wb = Attend(b, probe, hq, window, AttentionKernel::kReference);
    ASSERT_EQ(0, std::memcmp(wa.data(), wb.data(), wa.size() * 4)) << "drop " << drop;
  }
}

// ClearRow empties one row, even a ring row that has wrapped (which Rewind cannot reach), and
// leaves the other row as it was: refilled, the row equals a fresh store's, and row 1's view is
// bit for bit what it was.
TEST(KvStores, ClearRowEmptiesOneRowOnly) {
  std::mt19937 rng(21);
  const KvGeometry g{2, 1, 8, 8, DType::kF32};
  const int64_t window = 4, max_chunk = 3, hq = 2;  // ring capacity 6
  for (int kind = 0; kind < 2; ++kind) {
    std::unique_ptr<KvStore> used, fresh;
    if (kind == 0) {
      used = std::make_unique<RingStore>(g, window, max_chunk), fresh = std::make_unique<RingStore>(g, window, max_chunk);
    } else {
      used = std::make_unique<DenseStore>(g, 32), fresh = std::make_unique<DenseStore>(g, 32);
    }
    for (int64_t t = 0; t < 15; t += 3) ASSERT_TRUE(used->Append(MakeChunk(rng, g, hq, {t, t}, {3, 3}, false).Append(g)).ok());
    if (kind == 0) {
      EXPECT_FALSE(used->CanRewind(0, 15).ok());  // wrapped: only ClearRow empties it
    }
    const Chunk probe1 = MakeChunk(rng, g, hq, {15, 15}, {0, 1}, false);
    const std::vector<float> before = Attend(*used, probe1, hq, window, AttentionKernel::kReference);
    ASSERT_TRUE(used->ClearRow(0).ok());
    EXPECT_EQ(used->valid_len(0), 0);
    EXPECT_EQ(used->write_pos(0), 0);
    EXPECT_EQ(used->write_pos(1), 15);
    EXPECT_EQ(0, std::memcmp(before.data(), Attend(*used, probe1, hq, window, AttentionKernel::kReference).data(),
                             before.size() * 4));
    const Chunk again = MakeChunk(rng, g, hq, {0, 15}, {3, 0}, false);
    ASSERT_TRUE(used->Append(again.Append(g)).ok());
    ASSERT_TRUE(fresh->Append(again.Append(g)).ok());
    const Chunk probe0 = MakeChunk(rng, g, hq, {3, 15}, {1, 0}, false);
    ASSERT_TRUE(used->Append(probe0.Append(g)).ok());
    ASSERT_TRUE(fresh->Append(probe0.Append(g)).ok());
    const std::vector<float> wu = Attend(*used, probe0, hq, window, AttentionKernel::kReference);
    const std::vector<float> wf = Attend(*fresh, probe0, hq, window, AttentionKernel::kReference);
    const size_t row0 = wu.size() / 2;  // [B = 2, hq, 1, D]: row 0 first
    EXPECT_EQ(0, std::memcmp(wu.data(), wf.data(), row0 * 4)) << (kind == 0 ? "ring" : "dense");
  }
  EXPECT_FALSE(DenseStore(g, 8).ClearRow(2).ok());
}

// An append over the cache's rows [first_row, first_row + B) alone (the request runtime's step
// over some slots) writes what an append over every row writes with count 0 for the others: both
// stores' views, positions and write positions equal, byte for byte, over steps that wrap the rings.
TEST(KvStores, AppendToSomeRowsEqualsCountZeroElsewhere) {
  std::mt19937 rng(5);
  const KvGeometry g{3, 2, 8, 8, DType::kF32};
  const int64_t window = 4, max_chunk = 4, hq = 2;
  for (int kind = 0; kind < 2; ++kind) {
    auto make = [&]() -> std::unique_ptr<KvStore> {
      if (kind == 0) return std::make_unique<RingStore>(g, window, max_chunk);
      return std::make_unique<DenseStore>(g, 32);
    };
    std::unique_ptr<KvStore> some = make(), all = make();
    std::vector<int64_t> pos = {0, 0, 0};
    for (int step = 0; step < 12; ++step) {  // each row 10 tokens or more: the rings wrap
      const int64_t row = step % 3, n = 1 + step % max_chunk;
      std::vector<int64_t> counts = {0, 0, 0};
      counts[row] = n;
      const Chunk c = MakeChunk(rng, g, hq, pos, counts, false);
      ASSERT_TRUE(all->Append(c.Append(g)).ok());
      KvAppend one = c.Append(g);  // row `row` of the same chunk, as a one-row append
      one.k.data = one.k.At(row, 0, 0), one.v.data = one.v.At(row, 0, 0);
      one.k.batch = one.v.batch = 1;
      one.pos += row * c.S, one.block += row * c.S, one.count += row;
      one.first_row = row;
      ASSERT_TRUE(some->Append(one).ok());
      pos[row] += n;
    }
    const KvView vs = some->View(), va = all->View();
    const int64_t slots = vs.k.seq;
    for (int64_t r = 0; r < 3; ++r) {
      ASSERT_EQ(vs.kv_valid[r], va.kv_valid[r]) << "row " << r;
      ASSERT_EQ(some->write_pos(r), all->write_pos(r)) << "row " << r;
      EXPECT_EQ(0, std::memcmp(vs.k_pos + r * slots, va.k_pos + r * slots, slots * 4)) << "row " << r;
      for (int64_t h = 0; h < 2; ++h) {
        EXPECT_EQ(0, std::memcmp(vs.k.At(r, h, 0), va.k.At(r, h, 0), vs.kv_valid[r] * 8 * 4)) << "row " << r;
        EXPECT_EQ(0, std::memcmp(vs.v.At(r, h, 0), va.v.At(r, h, 0), vs.kv_valid[r] * 8 * 4)) << "row " << r;
      }
    }
  }
}

TEST(DenseStore, RewindThenReappendEqualsNeverAppended) {
  std::mt19937 rng(4);
  const KvGeometry g{2, 2, 8, 4, DType::kBF16};
  DenseStore a(g, 64), b(g, 64);
  const Chunk c1 = MakeChunk(rng, g, 2, {0, 0}, {10, 7}, false);
  const Chunk junk = MakeChunk(rng, g, 2, {10, 7}, {5, 3}, false);
  const Chunk c2 = MakeChunk(rng, g, 2, {10, 7}, {4, 2}, false);
  ASSERT_TRUE(a.Append(c1.Append(g)).ok());
  ASSERT_TRUE(a.Append(junk.Append(g)).ok());
  ASSERT_TRUE(a.Rewind(0, 5).ok());
  ASSERT_TRUE(a.Rewind(1, 3).ok());
  ASSERT_TRUE(a.Append(c2.Append(g)).ok());
  ASSERT_TRUE(b.Append(c1.Append(g)).ok());
  ASSERT_TRUE(b.Append(c2.Append(g)).ok());
  const KvView va = a.View(), vb = b.View();
  for (int64_t r = 0; r < 2; ++r) {
    ASSERT_EQ(va.kv_valid[r], vb.kv_valid[r]);
    for (int64_t h = 0; h < 2; ++h)
      ASSERT_EQ(0, std::memcmp(va.k.At(r, h, 0), vb.k.At(r, h, 0), va.kv_valid[r] * 8 * 2));
    ASSERT_EQ(0, std::memcmp(va.k_pos + r * 64, vb.k_pos + r * 64, va.kv_valid[r] * 4));
  }
  EXPECT_FALSE(a.Rewind(0, 100).ok());
}

TEST(KvStores, BadInput) {
  std::mt19937 rng(1);
  const KvGeometry g{1, 2, 8, 8, DType::kF32};
  DenseStore dense(g, 8);
  const Chunk c = MakeChunk(rng, g, 2, {0}, {6}, false);
  ASSERT_TRUE(dense.Append(c.Append(g)).ok());
  Status st = dense.Append(MakeChunk(rng, g, 2, {6}, {3}, false).Append(g));
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("exceeds capacity 8"), std::string::npos) << st.message();
  st = dense.Append(MakeChunk(rng, g, 2, {3}, {1}, false).Append(g));
  EXPECT_NE(st.message().find("position 3 of row 0 does not follow 5"), std::string::npos) << st.message();
  const KvGeometry wrong{1, 3, 8, 8, DType::kF32};
  st = dense.Append(MakeChunk(rng, wrong, 2, {6}, {1}, false).Append(wrong));
  EXPECT_NE(st.message().find("kv heads 3/3 != cache kv heads 2"), std::string::npos) << st.message();
  RingStore ring(g, 4, 2);
  st = ring.Append(MakeChunk(rng, g, 2, {0}, {3}, false).Append(g));
  EXPECT_NE(st.message().find("chunk of 3 tokens exceeds max_chunk 2"), std::string::npos) << st.message();
  ConcatStore concat(g);
  Chunk uneven = MakeChunk(rng, KvGeometry{2, 2, 8, 8, DType::kF32}, 2, {0, 0}, {2, 1}, false);
  ConcatStore concat2(KvGeometry{2, 2, 8, 8, DType::kF32});
  st = concat2.Append(uneven.Append(KvGeometry{2, 2, 8, 8, DType::kF32}));
  EXPECT_NE(st.message().find("same number of tokens"), std::string::npos) << st.message();
  // Rows past the cache's: refused, naming them (the concat store takes every row or none).
  const Chunk next = MakeChunk(rng, g, 2, {6}, {1}, false);
  KvAppend past = next.Append(g);
  past.first_row = 1;
  st = dense.Append(past);
  EXPECT_NE(st.message().find("rows [1, 2) are outside the cache's 1 rows"), std::string::npos) << st.message();
  past.first_row = -1;
  EXPECT_FALSE(dense.Append(past).ok());
  past.first_row = 0;
  EXPECT_TRUE(dense.Append(past).ok());  // the same append at row 0: only the rows were wrong
  KvAppend second = uneven.Append(KvGeometry{2, 2, 8, 8, DType::kF32});
  second.k.batch = second.v.batch = 1, second.first_row = 1;
  st = concat2.Append(second);
  EXPECT_NE(st.message().find("!= store batch 2"), std::string::npos) << st.message();
}

TEST(ExternalStore, TensorScatterAppendMatchesDense) {
  std::mt19937 rng(2);
  const KvGeometry g{2, 2, 8, 8, DType::kF32};
  std::vector<float> kc(2 * 2 * 16 * 8, -7.0f), vc(kc.size(), -7.0f);
  std::vector<int64_t> nonpad = {0, 0};
  ExternalStore ext(g, kc.data(), vc.data(), 16, nonpad.data());
  DenseStore dense(g, 16);
  std::vector<int64_t> pos = {0, 0};
  for (int step = 0; step < 5; ++step) {
    const std::vector<int64_t> counts = step == 0 ? std::vector<int64_t>{4, 4} : std::vector<int64_t>{1, 1};
    const Chunk c = MakeChunk(rng, g, 4, pos, counts, false);
    ASSERT_TRUE(ext.Append(c.Append(g)).ok());
    ASSERT_TRUE(dense.Append(c.Append(g)).ok());
    const std::vector<float> a = Attend(ext, c, 4, 100, AttentionKernel::kReference);
    const std::vector<float> b = Attend(dense, c, 4, 100, AttentionKernel::kReference);
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
    for (int r = 0; r < 2; ++r) pos[r] += counts[r];
  }
  EXPECT_EQ(nonpad[0], 8);
  // The caller's buffer holds the tokens at slots [0, 8) and is untouched beyond.
  EXPECT_EQ(kc[(0 * 16 + 8) * 8], -7.0f);
  EXPECT_NE(kc[(0 * 16 + 7) * 8], -7.0f);
  std::vector<int64_t> full = {15, 0};
  ExternalStore ext2(g, kc.data(), vc.data(), 16, full.data());
  Status st = ext2.Append(MakeChunk(rng, g, 4, {15, 0}, {2, 2}, false).Append(g));
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("write_indices[0] = 15"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tessera::kv
