// The request/slot runtime (runtime/request_runner.h): requests of different lengths, with and
// without images, joining at different steps while others decode, give exactly the tokens each
// gives alone; a slot's cached tokens are reused where the cache still holds them; bad requests
// are refused when added.
#include <gtest/gtest.h>

#include <random>

#include "runtime/request_runner.h"
#include "tiny_model.h"

namespace tessera::runtime {
namespace {

using testing::MakeTinyModel;
using testing::TinyModelOptions;

constexpr int32_t kImage = 90;
// For prompts that contain generated tokens: a placeholder id outside the vocabulary (97), which
// generation never produces.
constexpr int32_t kImageOutside = 120;

struct Case {
  Prompt prompt;
  std::vector<float> embeds;
  GenerateOptions options;
  int64_t start_step = 0;  // added at this step, or as soon after as a slot is free
};

// Text, an optional image block (token type 1) and text; own sampling seed per request.
std::unique_ptr<Case> MakeCase(uint32_t seed, int64_t before, int64_t image, int64_t after, int64_t hidden,
                               int32_t image_token = kImage) {
  auto c = std::make_unique<Case>();
  std::mt19937 rng(seed);
  auto text = [&] { return static_cast<int32_t>(3 + rng() % 80); };
  for (int64_t i = 0; i < before; ++i) c->prompt.tokens.push_back(text()), c->prompt.token_types.push_back(0);
  for (int64_t i = 0; i < image; ++i) c->prompt.tokens.push_back(image_token), c->prompt.token_types.push_back(1);
  for (int64_t i = 0; i < after; ++i) c->prompt.tokens.push_back(text()), c->prompt.token_types.push_back(0);
  std::normal_distribution<float> nd;
  c->embeds.resize(image * hidden);
  for (float& x : c->embeds) x = nd(rng);
  c->prompt.image_embeds = image ? c->embeds.data() : nullptr;
  c->prompt.image_rows = image;
  c->options.max_new_tokens = 6 + seed % 5;
  return c;
}

SessionOptions Options(int64_t slots) {
  SessionOptions o;
  o.max_batch = slots;
  o.max_context = 48;  // > the rings of window 5 (5 - 1 + 6 slots): sliding layers use rings
  o.max_chunk = 6;
  return o;
}

std::vector<int32_t> Alone(const model::GemmaModel& m, const Case& c) {
  auto s = Session::Create(m, Options(1), nullptr);
  EXPECT_TRUE(s.ok()) << s.status().message();
  GenerateOutput out;
  const Status st = Generate(*s.value(), {c.prompt}, c.options, &out);
  EXPECT_TRUE(st.ok()) << st.message();
  return out.rows.empty() ? std::vector<int32_t>{} : out.rows[0].tokens;
}

// Runs every case through a runner of `slots` slots, adding each at its start step (or later, when
// a slot frees up), and returns each request's result.
std::vector<RequestResult> RunTogether(const model::GemmaModel& m, const std::vector<std::unique_ptr<Case>>& cases,
                                       int64_t slots) {
  auto runner = RequestRunner::Create(m, Options(slots), nullptr);
  EXPECT_TRUE(runner.ok()) << runner.status().message();
  RequestRunner& r = *runner.value();
  std::vector<RequestId> ids(cases.size(), -1);
  size_t next = 0;
  for (int64_t step = 0; step < 1000 && (next < cases.size() || r.running() > 0); ++step) {
    while (next < cases.size() && cases[next]->start_step <= step && r.running() < r.slots()) {
      StatusOr<RequestId> id = r.Add(cases[next]->prompt, cases[next]->options);
      EXPECT_TRUE(id.ok()) << id.status().message();
      ids[next++] = id.value();
    }
    const Status st = r.Step();
    EXPECT_TRUE(st.ok()) << st.message();
  }
  std::vector<RequestResult> out;
  for (RequestId id : ids) {
    StatusOr<RequestResult> res = r.Take(id);
    EXPECT_TRUE(res.ok()) << res.status().message();
    out.push_back(res.ok() ? std::move(res.value()) : RequestResult{});
  }
  return out;
}

TEST(RequestRunner, RequestsStartedAtDifferentStepsMatchAlone) {
  std::vector<TinyModelOptions> variants(3);
  variants[0].gemma4 = false;
  variants[1].ple = true, variants[1].shared_layers = 2;
  variants[2].weight_dtype = DType::kBF16;
  for (const TinyModelOptions& v : variants) {
    auto m = MakeTinyModel(v);
    const int64_t H = m->arch().hidden;
    std::vector<std::unique_ptr<Case>> cases;
    cases.push_back(MakeCase(1, 3, 0, 2, H));    // short text
    cases.push_back(MakeCase(2, 4, 5, 9, H));    // image block, prefilled over several steps
    cases.push_back(MakeCase(3, 17, 0, 0, H));   // long text: three chunks
    cases.push_back(MakeCase(4, 1, 6, 1, H));    // a block of exactly max_chunk
    cases.push_back(MakeCase(5, 8, 0, 3, H));
    cases[3]->options.sampling = {0.9f, 20, 0.95f, 77};  // sampled: its own generator, same draws
    for (size_t i = 0; i < cases.size(); ++i) cases[i]->start_step = static_cast<int64_t>(3 * i);
    const std::vector<RequestResult> together = RunTogether(*m, cases, 3);
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_TRUE(together[i].status.ok()) << together[i].status.message();
      EXPECT_EQ(together[i].output.tokens, Alone(*m, *cases[i])) << "request " << i << " gemma4=" << v.gemma4;
      EXPECT_EQ(together[i].output.finish, FinishReason::kLength);
    }
  }
}

// Runs one request to its end on a runner and returns its result.
RequestResult RunOne(RequestRunner& r, const Case& c) {
  StatusOr<RequestId> id = r.Add(c.prompt, c.options);
  EXPECT_TRUE(id.ok()) << id.status().message();
  if (!id.ok()) return {};
  while (r.running() > 0) EXPECT_TRUE(r.Step().ok());
  return std::move(r.Take(id.value()).value());
}

TEST(RequestRunner, ReusesASlotsCachedPrefixWhereTheRingsStillHoldIt) {
  TinyModelOptions opt;
  opt.image_token = kImageOutside;
  auto m = MakeTinyModel(opt);
  const int64_t H = m->arch().hidden;
  auto runner = RequestRunner::Create(*m, Options(1), nullptr);
  ASSERT_TRUE(runner.ok());
  RequestRunner& r = *runner.value();
  std::unique_ptr<Case> first = MakeCase(7, 4, 3, 5, H, kImageOutside);  // 12 tokens, image block at 4..6
  const RequestResult a = RunOne(r, *first);
  EXPECT_EQ(a.reused_tokens, 0);
  // The conversation goes on: the prompt plus the answer plus new text. The slot holds the prompt
  // and the answer but its last token (sampled, never fed back): all of it is reused.
  Case next = *first;
  next.prompt.tokens.insert(next.prompt.tokens.end(), a.output.tokens.begin(), a.output.tokens.end());
  next.prompt.tokens.push_back(11);
  next.prompt.token_types.resize(next.prompt.tokens.size(), 0);
  next.options.max_new_tokens = 2;
  const RequestResult b = RunOne(r, next);
  EXPECT_EQ(b.reused_tokens, static_cast<int64_t>(first->prompt.tokens.size() + a.output.tokens.size()) - 1);
  EXPECT_EQ(b.output.tokens, Alone(*m, next));
  // The slot now holds 21 + 1 tokens. Token 19 changed: a rewind of 3, which rings of window 5 and
  // capacity 10 can make (they still hold the 4 tokens before token 19).
  Case edit = next;
  edit.prompt.tokens[19] = 12;
  const RequestResult c = RunOne(r, edit);
  EXPECT_EQ(c.reused_tokens, 19);
  EXPECT_EQ(c.output.tokens, Alone(*m, edit));
  // Token 9 changed: a rewind of 13; the rings no longer hold tokens 5..8, so the slot is cleared
  // and everything recomputed.
  Case early = edit;
  early.prompt.tokens[9] = 13;
  const RequestResult d = RunOne(r, early);
  EXPECT_EQ(d.reused_tokens, 0);
  EXPECT_EQ(d.output.tokens, Alone(*m, early));
}

TEST(RequestRunner, ReuseStopsAtImageRowsThatDifferAndNeverCutsABlock) {
  auto m = MakeTinyModel({});
  const int64_t H = m->arch().hidden;
  SessionOptions o = Options(1);
  o.max_context = 10;  // = the ring capacity: dense stores, every rewind possible
  auto runner = RequestRunner::Create(*m, o, nullptr);
  ASSERT_TRUE(runner.ok());
  RequestRunner& r = *runner.value();
  auto alone = [&](const Case& c) {
    auto s = Session::Create(*m, o, nullptr);
    GenerateOutput want;
    EXPECT_TRUE(Generate(*s.value(), {c.prompt}, c.options, &want).ok());
    return want.rows[0].tokens;
  };
  std::unique_ptr<Case> a = MakeCase(8, 3, 4, 2, H);  // image block at 3..6
  a->options.max_new_tokens = 1;
  EXPECT_EQ(RunOne(r, *a).reused_tokens, 0);
  // The same text and image rows, but the block is one token longer: the cached block tokens saw
  // a different block, so reuse stops at the block's start.
  Case b = *a;
  b.prompt.tokens.insert(b.prompt.tokens.begin() + 7, kImage);
  b.prompt.token_types.insert(b.prompt.token_types.begin() + 7, 1);
  b.embeds.resize(5 * H, 0.5f);
  b.prompt.image_embeds = b.embeds.data();
  b.prompt.image_rows = 5;
  const RequestResult rb = RunOne(r, b);
  EXPECT_EQ(rb.reused_tokens, 3);
  EXPECT_EQ(rb.output.tokens, alone(b));
  // The slot holds b. A prompt equal to it but for its third image row: reuse stops there, then
  // backs off to the block's start.
  Case c = b;
  c.embeds[2 * H] += 1.0f;
  c.prompt.image_embeds = c.embeds.data();
  const RequestResult rc = RunOne(r, c);
  EXPECT_EQ(rc.reused_tokens, 3);
  EXPECT_EQ(rc.output.tokens, alone(c));
  // Identical prompt: all but its last token reused (one token must run to give logits).
  const RequestResult rd = RunOne(r, c);
  EXPECT_EQ(rd.reused_tokens, static_cast<int64_t>(c.prompt.tokens.size()) - 1);
  EXPECT_EQ(rd.output.tokens, rc.output.tokens);
}

TEST(RequestRunner, ZeroNewTokensPrefillsOnly) {
  auto m = MakeTinyModel({});
  auto runner = RequestRunner::Create(*m, Options(1), nullptr);
  ASSERT_TRUE(runner.ok());
  std::unique_ptr<Case> c = MakeCase(3, 7, 0, 0, m->arch().hidden);
  c->options.max_new_tokens = 0;
  const RequestResult r = RunOne(*runner.value(), *c);
  EXPECT_TRUE(r.output.tokens.empty());  // as Generate: nothing sampled
  EXPECT_EQ(r.output.finish, FinishReason::kLength);
  EXPECT_TRUE(Alone(*m, *c).empty());
}

TEST(RequestRunner, CancelFreesTheSlotAndOthersGoOn) {
  auto m = MakeTinyModel({});
  const int64_t H = m->arch().hidden;
  auto runner = RequestRunner::Create(*m, Options(2), nullptr);
  ASSERT_TRUE(runner.ok());
  RequestRunner& r = *runner.value();
  std::unique_ptr<Case> a = MakeCase(1, 5, 0, 0, H), b = MakeCase(2, 9, 0, 0, H);
  const RequestId ia = r.Add(a->prompt, a->options).value(), ib = r.Add(b->prompt, b->options).value();
  ASSERT_TRUE(r.Step().ok());
  r.Cancel(ia);
  ASSERT_TRUE(r.Step().ok());
  EXPECT_TRUE(r.finished(ia));
  EXPECT_EQ(r.running(), 1);
  std::unique_ptr<Case> c = MakeCase(3, 4, 0, 0, H);
  const RequestId ic = r.Add(c->prompt, c->options).value();  // takes the freed slot
  while (r.running() > 0) ASSERT_TRUE(r.Step().ok());
  const RequestResult ra = r.Take(ia).value();
  EXPECT_EQ(ra.output.finish, FinishReason::kCancelled);
  EXPECT_EQ(r.Take(ib).value().output.tokens, Alone(*m, *b));
  EXPECT_EQ(r.Take(ic).value().output.tokens, Alone(*m, *c));
  EXPECT_FALSE(r.Take(ic).ok());  // handed over once
}

TEST(RequestRunner, BadRequestsAreRefusedWhenAdded) {
  auto m = MakeTinyModel({});
  const int64_t H = m->arch().hidden;
  SessionOptions bias = Options(2);
  bias.mode = Mode::kBias;
  EXPECT_FALSE(RequestRunner::Create(*m, bias, nullptr).ok());
  auto runner = RequestRunner::Create(*m, Options(1), nullptr);
  ASSERT_TRUE(runner.ok());
  RequestRunner& r = *runner.value();
  auto error = [&](const Prompt& p, const GenerateOptions& o = {}) {
    StatusOr<RequestId> id = r.Add(p, o);
    return id.ok() ? std::string("accepted") : id.status().message();
  };
  std::unique_ptr<Case> c = MakeCase(1, 3, 2, 1, H);
  Prompt p = c->prompt;
  p.tokens[1] = 500;
  EXPECT_NE(error(p).find("token id 500 at prompt position 1 is outside the vocabulary"), std::string::npos) << error(p);
  p = c->prompt;
  p.image_rows = 1;
  EXPECT_NE(error(p).find("2 image placeholder tokens but 1 image embedding rows"), std::string::npos);
  std::unique_ptr<Case> big = MakeCase(2, 1, 7, 1, H);  // a block of 7 > max_chunk 6
  EXPECT_NE(error(big->prompt).find("longer than max_chunk 6"), std::string::npos) << error(big->prompt);
  EXPECT_NE(error(Prompt{}).find("empty"), std::string::npos);
  GenerateOptions neg;
  neg.max_new_tokens = -1;
  EXPECT_NE(error(c->prompt, neg).find("max_new_tokens"), std::string::npos);
  ASSERT_TRUE(r.Add(c->prompt, c->options).ok());
  const Status busy = r.Add(c->prompt, c->options).status();
  EXPECT_EQ(busy.code(), StatusCode::kResourceExhausted) << busy.message();
  EXPECT_EQ(r.running(), 1);  // refusals changed nothing
}

}  // namespace
}  // namespace tessera::runtime
