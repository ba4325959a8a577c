// The generation loop (runtime/generator.h): streamed tokens are the returned tokens, in order;
// the callback and the cancel flag stop rows; finish reasons say why each row ended.
#include <gtest/gtest.h>

#include <atomic>
#include <random>

#include "runtime/generator.h"
#include "tiny_model.h"

namespace tessera::runtime {
namespace {

Prompt TextPrompt(uint32_t seed, int64_t len) {
  std::mt19937 rng(seed);
  Prompt p;
  for (int64_t i = 0; i < len; ++i) p.tokens.push_back(static_cast<int32_t>(3 + rng() % 80));
  return p;
}

std::unique_ptr<Session> MakeSession(const model::GemmaModel& m, int64_t batch, int64_t context = 64) {
  SessionOptions o;
  o.max_batch = batch;
  o.max_context = context;
  o.max_chunk = 8;
  auto s = Session::Create(m, o, nullptr);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return std::move(s.value());
}

TEST(Generator, StreamedTokensAreTheOutputInOrder) {
  auto m = testing::MakeTinyModel({});
  auto s = MakeSession(*m, 2);
  GenerateOptions o;
  o.max_new_tokens = 7;
  std::vector<std::vector<int32_t>> streamed(2);
  o.on_token = [&](int64_t row, int32_t tok) {
    streamed[row].push_back(tok);
    return true;
  };
  GenerateOutput out;
  ASSERT_TRUE(Generate(*s, {TextPrompt(1, 9), TextPrompt(2, 5)}, o, &out).ok());
  ASSERT_EQ(out.rows.size(), 2u);
  for (int b = 0; b < 2; ++b) {
    EXPECT_EQ(out.rows[b].tokens, streamed[b]);
    EXPECT_EQ(out.rows[b].tokens.size(), 7u);
    EXPECT_EQ(out.rows[b].finish, FinishReason::kLength);
  }
  EXPECT_EQ(out.stats.prompt_tokens, 14);
  EXPECT_EQ(out.stats.generated_tokens, 14);
  EXPECT_EQ(out.stats.decode_steps, 6);  // the last token is sampled, never fed back
}

TEST(Generator, CallbackStopsOneRowAndTheOtherGoesOn) {
  auto m = testing::MakeTinyModel({});
  auto s = MakeSession(*m, 2);
  GenerateOptions o;
  o.max_new_tokens = 9;
  GenerateOutput want;
  ASSERT_TRUE(Generate(*s, {TextPrompt(1, 9), TextPrompt(2, 5)}, o, &want).ok());
  o.on_token = [](int64_t row, int32_t) { return row != 0; };  // row 0 stops after its first token
  GenerateOutput out;
  ASSERT_TRUE(Generate(*s, {TextPrompt(1, 9), TextPrompt(2, 5)}, o, &out).ok());
  EXPECT_EQ(out.rows[0].tokens, std::vector<int32_t>(want.rows[0].tokens.begin(), want.rows[0].tokens.begin() + 1));
  EXPECT_EQ(out.rows[0].finish, FinishReason::kCancelled);
  EXPECT_EQ(out.rows[1].tokens, want.rows[1].tokens);  // decoding alone from then on changes nothing
  EXPECT_EQ(out.rows[1].finish, FinishReason::kLength);
}

TEST(Generator, CancelFlagStopsEveryRow) {
  auto m = testing::MakeTinyModel({});
  auto s = MakeSession(*m, 2);
  std::atomic<bool> cancel{false};
  GenerateOptions o;
  o.max_new_tokens = 20;
  o.cancel = &cancel;
  int seen = 0;
  o.on_token = [&](int64_t, int32_t) {
    if (++seen == 5) cancel = true;  // as another thread would, between two tokens
    return true;
  };
  GenerateOutput out;
  ASSERT_TRUE(Generate(*s, {TextPrompt(1, 9), TextPrompt(2, 5)}, o, &out).ok());
  for (const RowOutput& r : out.rows) {
    EXPECT_EQ(r.finish, FinishReason::kCancelled);
    EXPECT_LE(r.tokens.size(), 3u);
  }
  // Set before the call: the prefill stops at its first chunk boundary, no token is produced.
  GenerateOutput none;
  ASSERT_TRUE(Generate(*s, {TextPrompt(1, 30)}, o, &none).ok());
  EXPECT_TRUE(none.rows[0].tokens.empty());
  EXPECT_EQ(none.rows[0].finish, FinishReason::kCancelled);
}

TEST(Generator, FinishReasons) {
  auto m = testing::MakeTinyModel({});
  auto s = MakeSession(*m, 1, /*context=*/12);
  GenerateOptions o;
  o.max_new_tokens = 50;
  GenerateOutput out;
  ASSERT_TRUE(Generate(*s, {TextPrompt(3, 9)}, o, &out).ok());
  EXPECT_EQ(out.rows[0].finish, FinishReason::kContext);
  EXPECT_EQ(out.rows[0].tokens.size(), 4u);  // 9 prompt + 3 fed back = 12 = max_context, then one more sampled
  o.stop_tokens = {out.rows[0].tokens[1]};
  GenerateOutput stopped;
  ASSERT_TRUE(Generate(*s, {TextPrompt(3, 9)}, o, &stopped).ok());
  EXPECT_EQ(stopped.rows[0].finish, FinishReason::kStop);
  EXPECT_EQ(stopped.rows[0].tokens.back(), o.stop_tokens[0]);
  o.max_new_tokens = 0;
  ASSERT_TRUE(Generate(*s, {TextPrompt(3, 9)}, o, &out).ok());
  EXPECT_TRUE(out.rows[0].tokens.empty());
  EXPECT_EQ(out.rows[0].finish, FinishReason::kLength);
  o.max_new_tokens = -2;
  const Status bad = Generate(*s, {TextPrompt(3, 9)}, o, &out);
  EXPECT_NE(bad.message().find("max_new_tokens = -2"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace tessera::runtime
