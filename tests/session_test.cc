// Session self-consistency on in-memory random models: chunked prefill equals one-shot prefill,
// decode on the in-place cache equals prefill of the longer prompt, batched rows equal single
// rows, ring and dense stores agree, and bad input is refused with a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "runtime/session.h"
#include "tiny_model.h"

namespace tessera::runtime {
namespace {

using testing::MakeTinyModel;
using testing::MakeImagePrompt;
using testing::TinyModelOptions;

constexpr int32_t kImage = 90;

std::vector<float> AllLogits(const model::GemmaModel& m, const std::vector<Prompt>& prompts, int64_t max_chunk,
                             int64_t max_context = 128, ThreadPool* pool = nullptr) {
  SessionOptions o;
  o.max_batch = static_cast<int64_t>(prompts.size());
  o.max_chunk = max_chunk;
  o.max_context = max_context;
  o.all_logits = true;
  auto s = Session::Create(m, o, pool);
  EXPECT_TRUE(s.ok()) << s.status().message();
  int64_t s_max = 0;
  for (const Prompt& p : prompts) s_max = std::max<int64_t>(s_max, p.tokens.size());
  std::vector<float> logits(prompts.size() * s_max * m.arch().vocab, 0.0f);
  Status st = s.value()->Prefill(prompts, nullptr, logits.data());
  EXPECT_TRUE(st.ok()) << st.message();
  return logits;
}

void ExpectClose(const std::vector<float>& a, const std::vector<float>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  EXPECT_LE(worst, tol) << what;
}

std::vector<TinyModelOptions> Variants() {
  std::vector<TinyModelOptions> v(4);
  v[0].gemma4 = false;                      // Gemma 3 numerics
  v[1].gemma4 = true;                       // Gemma 4: k_eq_v, proportional RoPE, v_norm
  v[2].gemma4 = true, v[2].ple = true, v[2].shared_layers = 2;
  v[3].gemma4 = true, v[3].weight_dtype = DType::kBF16;
  return v;
}

// Logits are O(1..30); chunking only changes f32 summation order.
constexpr double kTol = 2e-4;

TEST(Session, ChunkedPrefillEqualsOneShot) {
  ThreadPool pool(2);
  for (const TinyModelOptions& opt : Variants()) {
    auto m = MakeTinyModel(opt);
    std::mt19937 rng(5);
    std::vector<float> e;
    const Prompt p = MakeImagePrompt(rng, 7, 6, 11, e, m->arch().hidden);  // 24 tokens, block at 7..12
    const std::vector<float> one = AllLogits(*m, {p}, 32, 128, &pool);
    for (int64_t chunk : {1 + 6, 8, 9, 13}) {  // 8 and 9 would split the block: the boundary moves
      SCOPED_TRACE(chunk);
      ExpectClose(AllLogits(*m, {p}, chunk, 128, &pool), one, kTol, "chunked vs one-shot");
    }
  }
}

TEST(Session, DecodeEqualsPrefillOfLongerPrompt) {
  for (const TinyModelOptions& opt : Variants()) {
    auto m = MakeTinyModel(opt);
    const int64_t V = m->arch().vocab;
    std::mt19937 rng(8);
    std::vector<float> e;
    Prompt full = MakeImagePrompt(rng, 3, 4, 14, e, m->arch().hidden);  // 21 tokens
    const std::vector<float> want = AllLogits(*m, {full}, 16);
    Prompt head = full;
    head.tokens.resize(12);
    head.token_types.resize(12);
    SessionOptions o;
    o.max_chunk = 4;  // ring capacity 5 - 1 + 4 = 8 < context: sliding layers use rings
    o.max_context = 64;
    auto s = std::move(Session::Create(*m, o, nullptr).value());
    std::vector<float> logits(V);
    ASSERT_TRUE(s->Prefill({head}, logits.data()).ok());
    for (int64_t i = 12; i < 21; ++i) {
      std::vector<float> expect(want.begin() + (i - 1) * V, want.begin() + i * V);
      ExpectClose(logits, expect, kTol, "decode step logits");
      ASSERT_TRUE(s->Decode(&full.tokens[i], nullptr, logits.data()).ok());
    }
    EXPECT_EQ(s->position(0), 21);
  }
}

TEST(Session, BatchedRowsEqualSingleRows) {
  for (const TinyModelOptions& opt : Variants()) {
    auto m = MakeTinyModel(opt);
    const int64_t V = m->arch().vocab;
    std::mt19937 rng(2);
    std::vector<float> e0, e1, e2;
    const Prompt a = MakeImagePrompt(rng, 2, 5, 9, e0, m->arch().hidden);   // 16 tokens
    const Prompt b = MakeImagePrompt(rng, 0, 3, 2, e1, m->arch().hidden);   // 5 tokens, block at the start
    const Prompt c = MakeImagePrompt(rng, 20, 0, 0, e2, m->arch().hidden);  // 20 tokens, no image
    const std::vector<float> batched = AllLogits(*m, {a, b, c}, 6);
    const int64_t s_max = 20;
    int row = 0;
    for (const Prompt* p : {&a, &b, &c}) {
      const std::vector<float> alone = AllLogits(*m, {*p}, 6);
      std::vector<float> slice(batched.begin() + row * s_max * V,
                               batched.begin() + (row * s_max + p->tokens.size()) * V);
      ExpectClose(slice, alone, kTol, "batched row vs alone");
      ++row;
    }
  }
}

TEST(Session, RingAndDenseStoresAgree) {
  auto m = MakeTinyModel({});
  std::mt19937 rng(4);
  std::vector<float> e;
  const Prompt p = MakeImagePrompt(rng, 10, 4, 30, e, m->arch().hidden);
  // max_chunk 4: rings of 8 slots; max_chunk 60 with context 64: the ring would not be smaller
  // than the context, so every layer is dense.
  ExpectClose(AllLogits(*m, {p}, 4, 64), AllLogits(*m, {p}, 60, 64), kTol, "ring vs dense");
}

TEST(Session, GenerateIsDeterministicAndStops) {
  auto m = MakeTinyModel({});
  std::mt19937 rng(6);
  std::vector<float> e;
  const Prompt p = MakeImagePrompt(rng, 5, 3, 2, e, m->arch().hidden);
  SessionOptions o;
  o.max_batch = 2;
  auto s = std::move(Session::Create(*m, o, nullptr).value());
  std::vector<std::vector<int32_t>> out1, out2;
  ASSERT_TRUE(testing::GenerateTokens(*s, {p, p}, 12, {}, {}, &out1).ok());
  EXPECT_EQ(out1[0].size(), 12u);
  EXPECT_EQ(out1[0], out1[1]);  // identical rows, greedy
  const Status gs = testing::GenerateTokens(*s, {p}, 12, {}, {out1[0][3]}, &out2);
  ASSERT_TRUE(gs.ok()) << gs.message();
  // Stops right after the first occurrence of the stop token.
  const auto first = std::find(out1[0].begin(), out1[0].end(), out1[0][3]);
  EXPECT_EQ(out2[0], std::vector<int32_t>(out1[0].begin(), first + 1));
  std::vector<std::vector<int32_t>> t1, t2;
  ASSERT_TRUE(testing::GenerateTokens(*s, {p}, 8, {0.8f, 10, 0.9f, 123}, {}, &t1).ok());
  ASSERT_TRUE(testing::GenerateTokens(*s, {p}, 8, {0.8f, 10, 0.9f, 123}, {}, &t2).ok());
  EXPECT_EQ(t1, t2);  // same seed, same tokens
}

// A placeholder id outside the vocabulary works (it is replaced, never looked up) and gives the
// same logits as an in-vocabulary placeholder with the same image embeddings.
TEST(Session, ImagePlaceholderOutsideTheVocabulary) {
  testing::TinyModelOptions in_vocab, out_of_vocab;
  out_of_vocab.image_token = 500;
  auto a = MakeTinyModel(in_vocab), b = MakeTinyModel(out_of_vocab);
  std::mt19937 rng(3);
  std::vector<float> e;
  Prompt p = MakeImagePrompt(rng, 4, 3, 5, e, a->arch().hidden);
  Prompt q = p;
  for (int32_t& t : q.tokens)
    if (t == kImage) t = 500;
  ExpectClose(AllLogits(*a, {p}, 16), AllLogits(*b, {q}, 16), 0.0, "placeholder id outside the vocabulary");
}

TEST(Session, BadInput) {
  auto m = MakeTinyModel({});
  std::mt19937 rng(1);
  std::vector<float> e;
  SessionOptions o;
  o.max_chunk = 4;
  o.max_context = 32;
  auto s = std::move(Session::Create(*m, o, nullptr).value());
  std::vector<float> logits(m->arch().vocab);
  auto error = [&](const Prompt& p) { return s->Prefill({p}, logits.data()).message(); };
  Prompt p = MakeImagePrompt(rng, 3, 5, 2, e, m->arch().hidden);  // block of 5 > max_chunk 4
  EXPECT_NE(error(p).find("image block of prompt 0 at token 3 is longer than the prefill chunk (max_chunk)"), std::string::npos)
      << error(p);
  p = MakeImagePrompt(rng, 3, 2, 2, e, m->arch().hidden);
  p.image_rows = 1;
  EXPECT_NE(error(p).find("2 image placeholder tokens but 1 image embedding rows"), std::string::npos) << error(p);
  p = MakeImagePrompt(rng, 3, 0, 2, e, m->arch().hidden);
  p.tokens[1] = 97;
  EXPECT_NE(error(p).find("token id 97 at [0, 1] is outside the vocabulary [0, 97)"), std::string::npos) << error(p);
  p = MakeImagePrompt(rng, 40, 0, 0, e, m->arch().hidden);
  EXPECT_NE(error(p).find("has 40 tokens, more than max_context 32"), std::string::npos) << error(p);
  p = MakeImagePrompt(rng, 31, 0, 0, e, m->arch().hidden);
  ASSERT_TRUE(s->Prefill({p}, logits.data()).ok());
  int32_t t = 1;
  ASSERT_TRUE(s->Decode(&t, nullptr, logits.data()).ok());  // position 31: the last slot
  const Status st = s->Decode(&t, nullptr, logits.data());
  EXPECT_NE(st.message().find("row 0 is at max_context 32"), std::string::npos) << st.message();
  p.token_types.resize(3);
  EXPECT_NE(error(p).find("3 token types for 31 tokens"), std::string::npos);
}

}  // namespace
}  // namespace tessera::runtime

namespace tessera::runtime {
namespace {

// docs/runtime.md "Modes": unified, bias and split modes produce the same tokens (and logits within f32
// rounding); bias/split refuse batches of unequal prompt lengths.
TEST(SessionModes, AllModesAgree) {
  for (const testing::TinyModelOptions& opt : Variants()) {
    auto m = testing::MakeTinyModel(opt);
    std::mt19937 rng(12);
    std::vector<float> e0, e1;
    const Prompt a = MakeImagePrompt(rng, 4, 5, 9, e0, m->arch().hidden);
    const Prompt b = MakeImagePrompt(rng, 9, 3, 6, e1, m->arch().hidden);  // same length (18)
    std::vector<std::vector<int32_t>> want;
    for (Mode mode : {Mode::kUnified, Mode::kBias, Mode::kSplit}) {
      SessionOptions o;
      o.max_batch = 2;
      o.max_chunk = 6;  // several chunks; rings of 5 - 1 + 6 slots
      o.max_context = 64;
      o.mode = mode;
      auto s = std::move(Session::Create(*m, o, nullptr).value());
      std::vector<std::vector<int32_t>> got;
      const Status st = testing::GenerateTokens(*s, {a, b}, 20, {}, {}, &got);
      ASSERT_TRUE(st.ok()) << ModeName(mode) << ": " << st.message();
      if (mode == Mode::kUnified) {
        want = got;
      } else {
        EXPECT_EQ(got, want) << ModeName(mode);
      }
    }
  }
}

TEST(SessionModes, BaselinesNeedEqualLengths) {
  auto m = testing::MakeTinyModel({});
  std::mt19937 rng(1);
  std::vector<float> e0, e1;
  const Prompt a = MakeImagePrompt(rng, 4, 0, 9, e0, m->arch().hidden);
  const Prompt b = MakeImagePrompt(rng, 2, 0, 9, e1, m->arch().hidden);
  SessionOptions o;
  o.max_batch = 2;
  o.mode = Mode::kSplit;
  auto s = std::move(Session::Create(*m, o, nullptr).value());
  std::vector<float> logits(2 * m->arch().vocab);
  const Status st = s->Prefill({a, b}, logits.data());
  EXPECT_NE(st.message().find("mode split needs prompts of equal length"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tessera::runtime

namespace tessera::model {
namespace {

// The tiny model with a cache for `rows` rows, activations for 8 tokens and scratch: what a caller
// driving GemmaModel::Forward directly holds.
struct ForwardRig {
  ForwardRig(int64_t max_context, int64_t max_chunk, int64_t rows) : m(testing::MakeTinyModel({})) {
    runtime::SessionOptions o;
    o.max_context = max_context;
    o.max_chunk = max_chunk;
    o.max_batch = rows;
    cache = std::move(kv::KvCache::Create(runtime::KvCacheConfigFor(m->arch(), o)).value());
    act.Allocate(m->arch(), 8, 1);
  }
  Status Forward(const ForwardBatch& in, float* logits) {
    return m->Forward(in, *cache, act, nullptr, scratch, logits);
  }

  std::unique_ptr<GemmaModel> m;
  std::unique_ptr<kv::KvCache> cache;
  Activations act;
  Arena scratch;
};

// A caller driving GemmaModel::Forward with its own chunks must not split an image block.
TEST(GemmaModel, RefusesAnImageBlockSplitAcrossChunks) {
  ForwardRig rig(32, 8, 1);
  const GemmaArch& a = rig.m->arch();
  std::vector<float> logits(a.vocab), embeds(8 * a.hidden, 0.5f);
  // Tokens 0..3 text, 4..7 image (block 0) in chunk one; chunk two continues block 0.
  std::vector<int32_t> tokens = {1, 2, 3, 4, 90, 90, 90, 90}, pos(8), block = {-1, -1, -1, -1, 0, 0, 0, 0};
  std::vector<uint8_t> use(8, 0);
  for (int i = 0; i < 8; ++i) pos[i] = i, use[i] = tokens[i] == 90;
  int32_t count = 8;
  ForwardBatch in{1, 8, tokens.data(), &count, pos.data(), block.data(), embeds.data(), use.data(), false};
  ASSERT_TRUE(rig.Forward(in, logits.data()).ok());
  for (int i = 0; i < 8; ++i) pos[i] = 8 + i, block[i] = i < 2 ? 0 : -1, tokens[i] = i < 2 ? 90 : 5;
  for (int i = 0; i < 8; ++i) use[i] = tokens[i] == 90;
  const Status st = rig.Forward(in, logits.data());
  EXPECT_NE(st.message().find("image block 0 of row 0 is split across prefill chunks"), std::string::npos)
      << st.message();
  block[0] = block[1] = 1;  // a new image right after the previous one is fine
  EXPECT_TRUE(rig.Forward(in, logits.data()).ok());
}

// A step's rows must be rows of the cache: first_row + batch past its end (or a negative first
// row) is refused before anything is written.
TEST(GemmaModel, RefusesRowsOutsideTheCache) {
  ForwardRig rig(16, 4, 2);
  std::vector<float> logits(2 * rig.m->arch().vocab);
  std::vector<int32_t> tokens = {5, 6, 7, 8}, pos = {0, 1, 2, 3}, count = {2, 2};
  ForwardBatch in{2, 2, tokens.data(), count.data(), pos.data()};
  in.first_row = 1;
  Status st = rig.Forward(in, logits.data());
  EXPECT_NE(st.message().find("rows [1, 3) are outside the cache's 2 rows"), std::string::npos) << st.message();
  in.first_row = -1;
  EXPECT_FALSE(rig.Forward(in, logits.data()).ok());
  in.batch = 1, in.first_row = 1;  // row 1 alone: fine
  EXPECT_TRUE(rig.Forward(in, logits.data()).ok());
  EXPECT_EQ(rig.cache->store(0).write_pos(1), 2);
  EXPECT_EQ(rig.cache->store(0).write_pos(0), 0);
}

}  // namespace
}  // namespace tessera::model
