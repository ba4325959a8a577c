// KvCache: layer map (KV sharing), store choice, the memory plan against the closed-form
// formula, and configuration errors.
#include <gtest/gtest.h>

#include <vector>

#include "model/reference_configs.h"
#include "tessera/kv/kv_cache.h"
#include "tessera/kv/ring_store.h"

namespace tessera::kv {
namespace {

KvCacheConfig Gemma4_12B(int64_t context, int64_t max_chunk) { return model::Gemma4_12BCache(context, max_chunk); }
KvCacheConfig Gemma3_12B(int64_t context, int64_t max_chunk) { return model::Gemma3_12BCache(context, max_chunk); }

TEST(KvCache, Gemma4_12BAt32kFitsUnder0_9GiB) {
  const KvCacheConfig cfg = Gemma4_12B(32768, 256);
  StatusOr<KvMemoryPlan> plan = KvCache::Plan(cfg);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  // Closed form: 2 (K and V) x kv_heads x slots x head_dim x 2 bytes, plus int32 position and
  // block per slot; ring slots = window - 1 + max_chunk.
  const double ring_slots = 1024 - 1 + 256;
  const double sliding = 2.0 * 8 * ring_slots * 256 * 2 + 2.0 * ring_slots * 4;
  const double full = 2.0 * 1 * 32768 * 512 * 2 + 2.0 * 32768 * 4;
  // Independent of the preset: count the layer kinds of the real model (every 6th full, the last
  // forced full, 48 layers) = 8 full, 40 sliding.
  const double want = 40 * sliding + 8 * full;
  // Each buffer is rounded up to 64 bytes: at most 4 x 63 bytes per layer.
  EXPECT_NEAR(static_cast<double>(plan.value().total_bytes), want, 48 * 4 * 63);
  EXPECT_LE(plan.value().total_bytes, 0.9 * 1024 * 1024 * 1024);
  int rings = 0, dense = 0;
  for (const KvLayerPlan& l : plan.value().layers) {
    rings += l.store == StoreKind::kRing;
    dense += l.store == StoreKind::kDense;
  }
  EXPECT_EQ(rings, 40);
  EXPECT_EQ(dense, 8);
  // Gemma-3-12B for comparison: the full layers carry 8 KV heads x 256 at 32k.
  const KvMemoryPlan g3 = KvCache::Plan(Gemma3_12B(32768, 256)).value();
  const double g3_full = 2.0 * 8 * 32768 * 256 * 2 + 2.0 * 32768 * 4;
  EXPECT_NEAR(static_cast<double>(g3.total_bytes), 40 * sliding + 8 * g3_full, 48 * 4 * 63);
}

TEST(KvCache, AllocatesExactlyThePlan) {
  KvCacheConfig cfg = Gemma4_12B(2048, 128);
  cfg.layers.resize(12);
  cfg.num_kv_shared_layers = 4;
  StatusOr<std::unique_ptr<KvCache>> cache = KvCache::Create(cfg);
  ASSERT_TRUE(cache.ok()) << cache.status().message();
  EXPECT_EQ(cache.value()->bytes(), cache.value()->plan().total_bytes);
}

TEST(KvCache, SharedLayersReadTheLastEarlierLayerOfTheSameType) {
  // Layers: S S F S S F S S | shared: S F S S  (12 layers, last 4 shared)
  KvCacheConfig cfg;
  const char* kinds = "SSFSSFSSSFSS";
  for (int i = 0; i < 12; ++i)
    cfg.layers.push_back(kinds[i] == 'F' ? KvLayerSpec{LayerKind::kFull, 1, 64, 64, 0}
                                         : KvLayerSpec{LayerKind::kSliding, 2, 32, 32, 16});
  cfg.num_kv_shared_layers = 4;
  cfg.max_context = 128;
  cfg.max_chunk = 8;
  auto cache = std::move(KvCache::Create(cfg).value());
  const LayerMap& map = cache->layer_map();
  const int64_t want_owner[12] = {0, 1, 2, 3, 4, 5, 6, 7, 7, 5, 7, 7};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(map.owner(i), want_owner[i]) << i;
  // Consumers see exactly the producer's buffers: same pointers, no copy.
  EXPECT_EQ(cache->View(9).k.data, cache->View(5).k.data);
  EXPECT_EQ(cache->View(11).v.data, cache->View(7).v.data);
  EXPECT_EQ(cache->View(11).k_pos, cache->View(7).k_pos);
  EXPECT_EQ(cache->plan().layers[9].bytes, 0u);
  // Writing to a consumer is refused.
  KvAppend in;
  Status st = cache->Append(9, in);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("layer 9 reads layer 5's KV (shared) and cannot be written"), std::string::npos)
      << st.message();
}

TEST(KvCache, ConfigErrors) {
  auto error_of = [](const KvCacheConfig& c) { return KvCache::Plan(c).status().message(); };
  KvCacheConfig c = Gemma4_12B(1024, 64);
  c.num_kv_shared_layers = 48;
  EXPECT_NE(error_of(c).find("num_kv_shared_layers 48 must be in [0, 48)"), std::string::npos);
  c = Gemma4_12B(1024, 64);
  c.layers = {KvLayerSpec{LayerKind::kSliding, 2, 32, 32, 8}, KvLayerSpec{LayerKind::kFull, 2, 32, 32, 0}};
  c.num_kv_shared_layers = 1;
  EXPECT_NE(error_of(c).find("shared layer 1 (full) has no earlier non-shared layer"), std::string::npos);
  c.layers = {KvLayerSpec{LayerKind::kFull, 2, 32, 32, 0}, KvLayerSpec{LayerKind::kFull, 4, 32, 32, 0}};
  EXPECT_NE(error_of(c).find("does not match its source layer 0"), std::string::npos);
  c = Gemma4_12B(1024, 64);
  c.layers[3].head_dim = 1024;
  EXPECT_NE(error_of(c).find("layer 3: head dims 1024/256"), std::string::npos);
  c = Gemma4_12B(1024, 64);
  c.layers[0].window = 0;
  EXPECT_NE(error_of(c).find("sliding window 0 < 1"), std::string::npos);
  c = Gemma4_12B(1024, 2048);
  EXPECT_NE(error_of(c).find("max_chunk 2048"), std::string::npos);
  c = Gemma4_12B(0, 1);
  EXPECT_NE(error_of(c).find("max_context 0"), std::string::npos);
}

TEST(KvCache, RewindIsAllOrNothing) {
  KvCacheConfig cfg;
  cfg.layers = {KvLayerSpec{LayerKind::kSliding, 1, 8, 8, 4}, KvLayerSpec{LayerKind::kFull, 1, 8, 8, 0}};
  cfg.max_context = 64;
  cfg.max_chunk = 2;
  cfg.dtype = DType::kF32;
  auto cache = std::move(KvCache::Create(cfg).value());
  std::vector<float> k(8 * 2, 1.0f);
  for (int32_t t = 0; t < 20; t += 2) {
    const int32_t pos[2] = {t, t + 1};
    KvAppend in;
    in.k = HeadsView::Dense(k.data(), DType::kF32, 1, 1, 2, 8);
    in.v = in.k;
    in.pos = pos;
    for (int layer = 0; layer < 2; ++layer) ASSERT_TRUE(cache->Append(layer, in).ok());
  }
  // The ring (4 - 1 + 2 = 5 slots) can drop 2 tokens but not 3; the dense layer could drop any.
  Status st = cache->Rewind(0, 3);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(cache->store(1).write_pos(0), 20);  // untouched
  EXPECT_TRUE(cache->Rewind(0, 2).ok());
  EXPECT_EQ(cache->store(0).write_pos(0), 18);
  EXPECT_EQ(cache->store(1).write_pos(0), 18);
}

}  // namespace
}  // namespace tessera::kv
