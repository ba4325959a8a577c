// Prefill skips (model::ForwardBatch::skip_unread, docs/runtime.md "Prefill skips"): where only each
// row's last prompt token is read, the KV-shared tail layers run on that token alone and chunks
// that end no prompt run no LM head. The skipping path against the full one in the same build
// (Session::set_skip_unread, or TESSERA_PREFILL_SKIP=0 for sessions made inside the engine): the
// same generated tokens (greedy and sampled) and the same last-position logits, over chunked
// prefill, batches of different lengths, image blocks and the request runtime's mixed steps; the
// work done (model::ForwardCounts) against counts derived from the prompts here; forward-style
// calls (every token's logits, taps) skip nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>

#include "runtime/generator.h"
#include "runtime/request_runner.h"
#include "runtime/session.h"
#include "tessera/engine.h"
#include "tiny_model.h"

namespace tessera::runtime {
namespace {

using testing::MakeTinyModel;
using testing::TinyModelOptions;

using testing::MakeImagePrompt;

// Trailing KV-shared layers: 2 and 3 of 6 (with and without PLE), none (only the LM-head skip).
std::vector<TinyModelOptions> Variants() {
  std::vector<TinyModelOptions> v(4);
  v[0].ple = true, v[0].shared_layers = 2;
  v[1].shared_layers = 3;
  v[2].gemma4 = false, v[2].shared_layers = 2;
  v[3].ple = true;
  return v;
}

SessionOptions Options(int64_t batch, int64_t chunk) {
  SessionOptions o;
  o.max_batch = batch;
  o.max_chunk = chunk;
  o.max_context = 64;  // > the rings of window 5: sliding layers use rings when chunks are short
  return o;
}

struct Prefilled {
  std::vector<float> last;  // [B, vocab]
  model::ForwardCounts counts;
};

Prefilled PrefillLast(const model::GemmaModel& m, const std::vector<Prompt>& prompts, int64_t chunk, bool skip,
                      ThreadPool* pool, Mode mode = Mode::kUnified) {
  SessionOptions o = Options(static_cast<int64_t>(prompts.size()), chunk);
  o.mode = mode;
  auto s = Session::Create(m, o, pool);
  EXPECT_TRUE(s.ok()) << s.status().message();
  s.value()->set_skip_unread(skip);
  Prefilled out;
  out.last.assign(prompts.size() * m.arch().vocab, 0.0f);
  const Status st = s.value()->Prefill(prompts, out.last.data());
  EXPECT_TRUE(st.ok()) << st.message();
  out.counts = s.value()->counts();
  return out;
}

// How far apart the two paths' logits may be. The skipping path runs the same operations on the
// same values, but the tail layers see one query row per sequence where the full path sees the
// chunk: their attention takes the decode kernel (keys split across threads, partial softmax
// states merged) instead of a prefill query tile, and their Linear layers at a few rows may take
// the row-dot path instead of the GEMM (the tiny models' weights are not repacked). Both are
// f32 sums in another order: ulps of logits that are O(1..30), as decode and prefill differ.
constexpr double kTol = 2e-5;

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst;
}

int64_t Shared(const model::GemmaModel& m) { return m.arch().num_layers() - m.arch().kv_writers_end(); }

TEST(PrefillSkip, LastLogitsMatchTheFullPrefill) {
  ThreadPool pool(2);
  for (const TinyModelOptions& opt : Variants()) {
    SCOPED_TRACE(::testing::Message() << "shared " << opt.shared_layers << " ple " << opt.ple);
    auto m = MakeTinyModel(opt);
    std::mt19937 rng(3);
    std::vector<float> e0, e1, e2;
    const Prompt a = MakeImagePrompt(rng, 2, 5, 9, e0, m->arch().hidden);   // 16 tokens
    const Prompt b = MakeImagePrompt(rng, 0, 3, 2, e1, m->arch().hidden);   // 5 tokens, block at the start
    const Prompt c = MakeImagePrompt(rng, 20, 0, 0, e2, m->arch().hidden);  // 20 tokens, text
    const Prompt d = MakeImagePrompt(rng, 6, 4, 0, e2, m->arch().hidden);   // ends inside an image block
    for (const std::vector<Prompt>& batch : {std::vector<Prompt>{a, b, c}, {c}, {d, a}}) {
      for (int64_t chunk : {32, 6, 1 + 5}) {
        SCOPED_TRACE(::testing::Message() << batch.size() << " rows, chunk " << chunk);
        const Prefilled full = PrefillLast(*m, batch, chunk, false, &pool);
        const Prefilled skip = PrefillLast(*m, batch, chunk, true, &pool);
        EXPECT_LE(MaxDiff(skip.last, full.last), kTol);
        EXPECT_LT(skip.counts.layer_tokens, full.counts.layer_tokens + (Shared(*m) == 0 ? 1 : 0));
      }
    }
  }
}

// The bias and split baselines: the tail's single query row goes through their dense-bias hook.
TEST(PrefillSkip, BaselineModesMatchTheFullPrefill) {
  TinyModelOptions opt;
  opt.ple = true, opt.shared_layers = 2;
  auto m = MakeTinyModel(opt);
  std::mt19937 rng(7);
  std::vector<float> e0, e1;
  const Prompt a = MakeImagePrompt(rng, 3, 5, 6, e0, m->arch().hidden), b = MakeImagePrompt(rng, 14, 0, 0, e1, 0);
  for (Mode mode : {Mode::kBias, Mode::kSplit}) {
    SCOPED_TRACE(ModeName(mode));
    const Prefilled full = PrefillLast(*m, {a, b}, 6, false, nullptr, mode);
    const Prefilled skip = PrefillLast(*m, {a, b}, 6, true, nullptr, mode);
    EXPECT_LE(MaxDiff(skip.last, full.last), kTol);
    EXPECT_LT(skip.counts.layer_tokens, full.counts.layer_tokens);
  }
}

// The work, from the prompt lengths alone: one 20-token prompt in chunks of 6 (6, 6, 6, 2 tokens)
// and three prompts of 16, 5 and 20 tokens in one chunk (20 slots a row).
TEST(PrefillSkip, CountsTheWorkItSkips) {
  for (const TinyModelOptions& opt : Variants()) {
    auto m = MakeTinyModel(opt);
    const int64_t L = m->arch().num_layers(), sh = opt.shared_layers;
    std::mt19937 rng(4);
    std::vector<float> e;
    const Prompt a = MakeImagePrompt(rng, 16, 0, 0, e, 0), b = MakeImagePrompt(rng, 5, 0, 0, e, 0),
                 c = MakeImagePrompt(rng, 20, 0, 0, e, 0);
    const Prefilled full1 = PrefillLast(*m, {c}, 6, false, nullptr);
    EXPECT_EQ(full1.counts.layer_tokens, L * 20);
    EXPECT_EQ(full1.counts.head_rows, 4);  // one row per chunk
    const Prefilled skip1 = PrefillLast(*m, {c}, 6, true, nullptr);
    EXPECT_EQ(skip1.counts.layer_tokens, (L - sh) * 20 + sh * 1);
    EXPECT_EQ(skip1.counts.head_rows, 1);  // the last chunk's only
    const Prefilled full3 = PrefillLast(*m, {a, b, c}, 32, false, nullptr);
    EXPECT_EQ(full3.counts.layer_tokens, L * 3 * 20);
    EXPECT_EQ(full3.counts.head_rows, 3);
    const Prefilled skip3 = PrefillLast(*m, {a, b, c}, 32, true, nullptr);
    EXPECT_EQ(skip3.counts.layer_tokens, (L - sh) * 3 * 20 + sh * 3);
    EXPECT_EQ(skip3.counts.head_rows, 3);
  }
}

// Every token's logits and the per-layer taps are forward-style reads: nothing is skipped there.
TEST(PrefillSkip, ForwardStyleCallsRunEveryToken) {
  TinyModelOptions opt;
  opt.ple = true, opt.shared_layers = 2;
  auto m = MakeTinyModel(opt);
  const int64_t L = m->arch().num_layers(), V = m->arch().vocab, H = m->arch().hidden;
  std::mt19937 rng(6);
  std::vector<float> e;
  const Prompt p = MakeImagePrompt(rng, 3, 4, 5, e, H);  // 12 tokens
  SessionOptions o = Options(1, 16);
  o.all_logits = true;
  auto s = std::move(Session::Create(*m, o, nullptr).value());
  ASSERT_TRUE(s->skip_unread());
  std::vector<float> last(V), all(12 * V);
  ASSERT_TRUE(s->Prefill({p}, last.data(), all.data()).ok());
  EXPECT_EQ(s->counts().layer_tokens, L * 12);
  EXPECT_EQ(s->counts().head_rows, 12);
  std::vector<float> hidden(L * 12 * H);
  model::ActivationTap tap{hidden.data()};
  ASSERT_TRUE(s->Prefill({p}, last.data(), nullptr, &tap).ok());
  EXPECT_EQ(s->counts().layer_tokens, 2 * L * 12);
  // The tail layers' taps hold every position: the last layer's residual at the first token too.
  double first = 0;
  for (int64_t i = 0; i < H; ++i) first += std::fabs(hidden[((L - 1) * 12) * H + i]);
  EXPECT_GT(first, 0.0);
}

std::vector<std::vector<int32_t>> GenerateWith(const model::GemmaModel& m, const std::vector<Prompt>& prompts,
                                               int64_t chunk, const SamplingParams& sampling, bool skip,
                                               ThreadPool* pool) {
  auto s = Session::Create(m, Options(static_cast<int64_t>(prompts.size()), chunk), pool);
  EXPECT_TRUE(s.ok()) << s.status().message();
  s.value()->set_skip_unread(skip);
  std::vector<std::vector<int32_t>> out;
  const Status st = testing::GenerateTokens(*s.value(), prompts, 12, sampling, {}, &out);
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

TEST(PrefillSkip, GeneratesTheSameTokens) {
  ThreadPool pool(2);
  for (const TinyModelOptions& opt : Variants()) {
    auto m = MakeTinyModel(opt);
    std::mt19937 rng(9);
    std::vector<float> e0, e1;
    const Prompt a = MakeImagePrompt(rng, 4, 6, 7, e0, m->arch().hidden);  // 17 tokens
    const Prompt b = MakeImagePrompt(rng, 9, 0, 0, e1, m->arch().hidden);  // 9 tokens
    for (const SamplingParams& sp : {SamplingParams{}, SamplingParams{0.9f, 20, 0.95f, 123}}) {
      for (int64_t chunk : {6, 32}) {
        SCOPED_TRACE(::testing::Message() << "temperature " << sp.temperature << " chunk " << chunk);
        const auto full = GenerateWith(*m, {a, b}, chunk, sp, false, &pool);
        EXPECT_EQ(GenerateWith(*m, {a, b}, chunk, sp, true, &pool), full);
      }
    }
  }
}

// The request runtime: prefill chunks share steps with other rows' decode tokens; its session
// reads the switch from the environment.
std::vector<std::vector<int32_t>> RunRequests(const model::GemmaModel& m, const std::vector<Prompt>& prompts,
                                              bool skip) {
  if (skip) {
    unsetenv("TESSERA_PREFILL_SKIP");
  } else {
    setenv("TESSERA_PREFILL_SKIP", "0", 1);
  }
  auto runner = RequestRunner::Create(m, Options(2, 6), nullptr);
  unsetenv("TESSERA_PREFILL_SKIP");
  EXPECT_TRUE(runner.ok()) << runner.status().message();
  RequestRunner& r = *runner.value();
  std::vector<RequestId> ids;
  std::vector<GenerateOptions> opts(prompts.size());
  size_t next = 0;
  for (int64_t step = 0; step < 500 && (next < prompts.size() || r.running() > 0); ++step) {
    // A new request every other step, while slots are free: joins mid-decode of the others.
    if (next < prompts.size() && step % 2 == 0 && r.running() < r.slots()) {
      opts[next].max_new_tokens = 5 + static_cast<int64_t>(next);
      if (next % 2) opts[next].sampling = {0.8f, 0, 1.0f, 40 + next};
      StatusOr<RequestId> id = r.Add(prompts[next], opts[next]);
      EXPECT_TRUE(id.ok()) << id.status().message();
      ids.push_back(id.value());
      ++next;
    }
    EXPECT_TRUE(r.Step().ok());
  }
  std::vector<std::vector<int32_t>> out;
  for (RequestId id : ids) out.push_back(r.Take(id).value().output.tokens);
  return out;
}

TEST(PrefillSkip, RequestBatchGivesTheSameTokens) {
  for (const TinyModelOptions& opt : Variants()) {
    auto m = MakeTinyModel(opt);
    std::mt19937 rng(12);
    std::vector<float> e0, e1, e2;
    const std::vector<Prompt> prompts = {
        MakeImagePrompt(rng, 3, 0, 2, e0, m->arch().hidden), MakeImagePrompt(rng, 4, 5, 9, e1, m->arch().hidden),
        MakeImagePrompt(rng, 17, 0, 0, e2, m->arch().hidden), MakeImagePrompt(rng, 1, 6, 1, e2, m->arch().hidden)};
    const auto full = RunRequests(*m, prompts, false);
    EXPECT_EQ(RunRequests(*m, prompts, true), full);
  }
}

// The checkpoints with KV sharing (tests/testdata: gemma4 with 3 of 6 layers shared, images;
// gemma4_text with 3 of 7), through the public API: weights repacked at load, so every Linear runs
// one kernel for any row count and only the tail's attention kernel differs between the paths.
struct Checkpoint {
  std::unique_ptr<Model> model;
  std::vector<Prompt> prompts;
  std::vector<float> embeds;
};

Checkpoint LoadCheckpoint(const std::string& name) {
  Checkpoint c;
  LoadOptions lo;
  lo.threads = 2;
  StatusOr<std::unique_ptr<Model>> m = Model::Load(std::string(TESSERA_TESTDATA_DIR) + "/models/" + name, lo);
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok()) return c;
  c.model = std::move(m).value();
  const ModelInfo& info = c.model->info();
  const int64_t image = info.image_token_id ? 5 : 0;
  c.embeds.resize(image * info.hidden);
  std::mt19937 rng(21);
  std::normal_distribution<float> nd;
  for (float& x : c.embeds) x = nd(rng);
  for (int64_t len : {19, 7, 26}) {
    Prompt p;
    for (int64_t i = 0; i < len; ++i) {
      const bool img = len == 19 && i >= 6 && i < 6 + image;  // the first prompt holds the image block
      p.tokens.push_back(img ? *info.image_token_id : static_cast<int32_t>(16 + (i * 37 + len) % 400));
      p.token_types.push_back(img ? 1 : 0);
    }
    if (len == 19 && image) p.image_embeds = c.embeds.data(), p.image_rows = image;
    c.prompts.push_back(p);
  }
  return c;
}

std::unique_ptr<tessera::Session> NewSession(const Model& m, int64_t chunk, bool skip) {
  if (!skip) setenv("TESSERA_PREFILL_SKIP", "0", 1);
  StatusOr<std::unique_ptr<tessera::Session>> s = m.NewSession(Options(3, chunk));
  unsetenv("TESSERA_PREFILL_SKIP");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? std::move(s).value() : nullptr;
}

TEST(PrefillSkip, CheckpointsGiveTheSameLogitsAndTokens) {
  for (const char* name : {"gemma4", "gemma4_text"}) {
    SCOPED_TRACE(name);
    Checkpoint c = LoadCheckpoint(name);
    ASSERT_TRUE(c.model);
    const int64_t V = c.model->info().vocab;
    for (int64_t chunk : {32, 8}) {
      SCOPED_TRACE(chunk);
      std::vector<float> full(3 * V), skip(3 * V);
      ASSERT_TRUE(NewSession(*c.model, chunk, false)->Prefill(c.prompts, full.data()).ok());
      ASSERT_TRUE(NewSession(*c.model, chunk, true)->Prefill(c.prompts, skip.data()).ok());
      EXPECT_LE(MaxDiff(skip, full), kTol);
      for (const SamplingParams& sp : {SamplingParams{}, SamplingParams{1.0f, 0, 0.9f, 5}}) {
        GenerateOptions g;
        g.max_new_tokens = 16;
        g.sampling = sp;
        GenerateOutput a, b;
        ASSERT_TRUE(NewSession(*c.model, chunk, false)->Generate(c.prompts, g, &a).ok());
        ASSERT_TRUE(NewSession(*c.model, chunk, true)->Generate(c.prompts, g, &b).ok());
        for (size_t r = 0; r < a.rows.size(); ++r) EXPECT_EQ(b.rows[r].tokens, a.rows[r].tokens) << "row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::runtime
