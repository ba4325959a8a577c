// SessionOptions::attention_precision: bf16 needs a bf16 KV cache, and a bf16-precision session
// computes the same model as an f32-precision one up to bf16 rounding of attention's operands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "runtime/session.h"
#include "tiny_model.h"

namespace tessera::runtime {
namespace {

TEST(SessionPrecision, Bf16NeedsBf16Cache) {
  auto m = testing::MakeTinyModel({});
  for (DType dt : {DType::kF32, DType::kF16}) {
    SessionOptions o;
    o.max_context = 32, o.max_chunk = 8;
    o.kv_dtype = dt;
    o.attention_precision = AttentionPrecision::kBf16;
    auto s = Session::Create(*m, o, nullptr);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("attention precision bf16 needs a bf16 KV cache, got kv_dtype " +
                                        std::string(DTypeName(dt))),
              std::string::npos)
        << s.status().message();
  }
}

// Prefill (a prompt with an image block, several chunks) and 8 decode steps in three runs: f32
// cache at f32 precision, bf16 cache at f32, bf16 cache at bf16. Rounding q and the softmax weights
// to bf16 perturbs the same products that rounding K and V to bf16 does, by the same relative
// amount (2^-8), so its effect on the logits must be of the same size as the bf16 cache's: within
// 3x of it (and not zero: the option is wired through).
TEST(SessionPrecision, Bf16CostsWhatABf16CacheCosts) {
  ThreadPool pool(2);
  for (bool gemma4 : {true, false}) {
    testing::TinyModelOptions mo;
    mo.gemma4 = gemma4;
    auto m = testing::MakeTinyModel(mo);
    const int64_t V = m->arch().vocab;
    std::mt19937 rng(7);
    Prompt p;
    std::uniform_int_distribution<int32_t> tok(0, 80);
    for (int i = 0; i < 40; ++i) p.tokens.push_back(tok(rng)), p.token_types.push_back(i >= 10 && i < 16 ? 1 : 0);
    std::vector<float> embeds(6 * m->arch().hidden);
    std::normal_distribution<float> nd;
    for (float& x : embeds) x = nd(rng);
    for (int i = 10; i < 16; ++i) p.tokens[i] = mo.image_token;
    p.image_embeds = embeds.data();
    p.image_rows = 6;
    std::vector<std::vector<float>> logits(3);
    for (int which = 0; which < 3; ++which) {
      SessionOptions o;
      o.max_context = 64, o.max_chunk = 16;
      o.kv_dtype = which ? DType::kBF16 : DType::kF32;
      o.attention_precision = which == 2 ? AttentionPrecision::kBf16 : AttentionPrecision::kF32;
      auto s = Session::Create(*m, o, &pool);
      ASSERT_TRUE(s.ok()) << s.status().message();
      std::vector<float> step(V);
      ASSERT_TRUE(s.value()->Prefill({p}, step.data()).ok());
      logits[which].insert(logits[which].end(), step.begin(), step.end());
      for (int t = 0; t < 8; ++t) {
        const int32_t next = static_cast<int32_t>(t * 11 % 80);  // the same tokens in both runs
        const uint8_t active = 1;
        ASSERT_TRUE(s.value()->Decode(&next, &active, step.data()).ok());
        logits[which].insert(logits[which].end(), step.begin(), step.end());
      }
    }
    double cache_diff = 0, precision_diff = 0;
    for (size_t i = 0; i < logits[0].size(); ++i) {
      cache_diff = std::max(cache_diff, std::fabs(double(logits[1][i]) - logits[0][i]));
      precision_diff = std::max(precision_diff, std::fabs(double(logits[2][i]) - logits[1][i]));
    }
    EXPECT_GT(cache_diff, 0.0) << "gemma4 " << gemma4;
    EXPECT_GT(precision_diff, 0.0) << "gemma4 " << gemma4;
    EXPECT_LE(precision_diff, 3 * cache_diff) << "gemma4 " << gemma4;
    std::printf("gemma4 %d: largest logit change from a bf16 cache %.5f, from bf16 attention on it %.5f\n", gemma4,
                cache_diff, precision_diff);
  }
}

}  // namespace
}  // namespace tessera::runtime
