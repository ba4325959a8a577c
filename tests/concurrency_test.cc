// Thread safety of the public entry points: one ThreadPool and one model shared by several
// caller threads give every caller exactly what it gets alone (bitwise). Also built under
// ThreadSanitizer (scripts/test.sh --tsan runs this suite and the thread pool's).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "runtime/session.h"
#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"
#include "tessera/engine.h"
#include "tessera/image.h"
#include "tessera/thread_pool.h"
#include "tiny_model.h"

namespace tessera {
namespace {

constexpr int kCallers = 4;

TEST(Concurrency, CallersOfOnePoolEachGetEveryItemOnce) {
  ThreadPool pool(3);
  std::vector<std::thread> callers;
  std::atomic<int> bad{0};
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 200; ++rep) {
        const int64_t n = 1 + (c * 37 + rep) % 300;
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(n, [&](int64_t i, int t) {
          hits[i].fetch_add(1);
          if (t < 0 || t >= pool.num_threads()) bad.fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) bad.fetch_add(hits[i].load() != 1);
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(Concurrency, NestedParallelForRunsInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  pool.ParallelFor(8, [&](int64_t i, int outer) {
    pool.ParallelFor(4, [&](int64_t j, int t) {
      // Inline on the item's thread, under its index: per-thread scratch indexed by t is never
      // shared with the thread that runs index 0's items meanwhile.
      EXPECT_EQ(t, outer);
      sum.fetch_add(i * 4 + j);
    });
  });
  EXPECT_EQ(sum.load(), 31 * 32 / 2);
}

TEST(Concurrency, PoolSizeIsValidated) {
  EXPECT_FALSE(ThreadPool::Create(0).ok());
  EXPECT_FALSE(ThreadPool::Create(ThreadPool::kMaxThreads + 1).ok());
  StatusOr<std::unique_ptr<ThreadPool>> p = ThreadPool::Create(3);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p.value()->num_threads(), 3);
}

// Greedy tokens of one session on the shared model and pool.
std::vector<int32_t> Generate(const model::GemmaModel& m, ThreadPool* pool, uint32_t seed) {
  std::mt19937 rng(seed);
  runtime::Prompt p;
  for (int i = 0; i < 9; ++i) p.tokens.push_back(static_cast<int32_t>(3 + rng() % 80));
  runtime::SessionOptions o;
  o.max_context = 64;
  o.max_chunk = 4;
  auto s = runtime::Session::Create(m, o, pool);
  EXPECT_TRUE(s.ok()) << s.status().message();
  std::vector<std::vector<int32_t>> out;
  EXPECT_TRUE(testing::GenerateTokens(*s.value(), {p}, 12, {}, {}, &out).ok());
  return out.empty() ? std::vector<int32_t>{} : out[0];
}

TEST(Concurrency, SessionsOnOneModelAndPoolMatchAlone) {
  auto m = testing::MakeTinyModel({});
  ThreadPool pool(2);
  std::vector<std::vector<int32_t>> alone(kCallers), together(kCallers);
  for (int c = 0; c < kCallers; ++c) alone[c] = Generate(*m, &pool, 100 + c);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 3; ++rep) together[c] = Generate(*m, &pool, 100 + c);
    });
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(together[c], alone[c]) << "caller " << c;
}

// Prefill attention over random data; each caller has its own arena, all share the pool.
std::vector<float> AttentionOut(ThreadPool* pool, Arena* arena, uint32_t seed) {
  const int64_t B = 1, Hq = 4, Hkv = 2, S = 96, D = 32;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> q(B * Hq * S * D), k(B * Hkv * S * D), v(B * Hkv * S * D), out(B * Hq * S * D);
  for (auto* x : {&q, &k, &v})
    for (float& f : *x) f = nd(rng);
  std::vector<int32_t> pos(S);
  for (int64_t i = 0; i < S; ++i) pos[i] = static_cast<int32_t>(i);
  AttentionParams p;
  p.q = {q.data(), DType::kF32, B, Hq, S, D, Hq * S * D, S * D, D};
  p.k = {k.data(), DType::kF32, B, Hkv, S, D, Hkv * S * D, S * D, D};
  p.v = {v.data(), DType::kF32, B, Hkv, S, D, Hkv * S * D, S * D, D};
  p.out = {out.data(), B, Hq, S, D, Hq * S * D, S * D, D};
  p.mask.q_pos = p.mask.k_pos = pos.data();
  p.mask.window_left = 40;
  p.scale = 0.2f;
  AttentionContext ctx{pool, arena};
  EXPECT_TRUE(Attention(p, ctx, AttentionKernel::kPrefill).ok());
  return out;
}

TEST(Concurrency, AttentionCallsOnOnePoolMatchAlone) {
  ThreadPool pool(2);
  std::vector<std::vector<float>> alone(kCallers), together(kCallers);
  for (int c = 0; c < kCallers; ++c) {
    Arena a;
    alone[c] = AttentionOut(&pool, &a, 7 + c);
  }
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&, c] {
      Arena a;
      for (int rep = 0; rep < 5; ++rep) together[c] = AttentionOut(&pool, &a, 7 + c);
    });
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c)
    EXPECT_EQ(0, std::memcmp(together[c].data(), alone[c].data(), alone[c].size() * sizeof(float))) << c;
}

// A random RGB image of side x side patches through the processor, set up for the tiny Gemma 4
// tower (patch 2, pooling 2, no resize): (side / 2)^2 soft tokens, padded to the 70-token budget.
image::PixelInput GridPixels(int64_t side, uint32_t seed) {
  image::ProcessorConfig c;
  c.family = image::Family::kGemma4;
  c.patch_size = 2, c.pooling_kernel_size = 2, c.do_resize = false;
  StatusOr<image::ImageProcessor> p = image::ImageProcessor::FromConfig(c);
  EXPECT_TRUE(p.ok()) << p.status().message();
  std::mt19937 rng(seed);
  image::Image im{2 * side, 2 * side, {}};
  for (int64_t i = 0; i < im.height * im.width * 3; ++i) im.rgb.push_back(static_cast<uint8_t>(rng()));
  StatusOr<image::PixelInput> in = p.value().Process(im, 70);
  EXPECT_TRUE(in.ok()) << in.status().message();
  return in.ok() ? std::move(in).value() : image::PixelInput{};
}

// Callers encoding images of different sizes at once on one Model: the encoder's kept scratch goes
// to one of them at a time (and grows for the larger ones), the others get fresh scratch; every
// caller gets the bits it gets alone.
TEST(Concurrency, ImageEncodesOnOneModelMatchAlone) {
  LoadOptions o;
  o.threads = 2;
  StatusOr<std::unique_ptr<Model>> m = Model::Load(std::string(TESSERA_TESTDATA_DIR) + "/models/gemma4", o);
  ASSERT_TRUE(m.ok()) << m.status().message();
  std::vector<std::vector<float>> alone(kCallers), together(kCallers);
  for (int c = 0; c < kCallers; ++c) {
    StatusOr<ImageFeatures> f = m.value()->EncodePixels({GridPixels(6 + 2 * c, 300 + c)});
    ASSERT_TRUE(f.ok()) << f.status().message();
    alone[c] = f.value().rows;
  }
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 4; ++rep) {
        StatusOr<ImageFeatures> f = m.value()->EncodePixels({GridPixels(6 + 2 * c, 300 + c)});
        EXPECT_TRUE(f.ok()) << f.status().message();
        if (f.ok()) together[c] = f.value().rows;
      }
    });
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) {
    ASSERT_EQ(together[c].size(), alone[c].size()) << c;
    EXPECT_EQ(0, std::memcmp(together[c].data(), alone[c].data(), alone[c].size() * sizeof(float))) << c;
  }
}

}  // namespace
}  // namespace tessera
