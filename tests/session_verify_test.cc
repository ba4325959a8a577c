// Session::Verify (a multi-row step that speculative decoding checks drafts with) gives each of its
// rows the very bits a one-row Decode step at that position gives, so that speculative greedy
// output equals plain greedy output even where the top two logits nearly tie (docs/speculative.md).
// Covers the sliding layers' rings after they wrap, global layers over several key tiles and decode
// splits, KV-shared layers, rewinds, thread counts, bf16 attention and matmuls, MoE, and quantized
// weights.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/loaded_model.h"
#include "runtime/quantize_model_meta.h"
#include "runtime/session.h"
#include "tiny_model.h"

namespace tessera::runtime {
namespace {

const std::string kModels = std::string(TESSERA_TESTDATA_DIR) + "/models/";

struct Precision {
  DType kv = DType::kF32;
  AttentionPrecision attention = AttentionPrecision::kF32;
  ops::MatmulPrecision matmul = ops::MatmulPrecision::kF32;
};

std::unique_ptr<Session> NewSession(const model::GemmaModel& m, const Precision& pr, ThreadPool* pool) {
  SessionOptions o;
  o.max_context = 320;
  o.max_chunk = 16;
  o.verify_tokens = 16;
  o.kv_dtype = pr.kv;
  o.attention_precision = pr.attention;
  o.matmul_precision = pr.matmul;
  auto s = Session::Create(m, o, pool);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? std::move(s.value()) : nullptr;
}

// Feeds the same rounds to two sessions holding the same prompt: `plain` one token per Decode step,
// `spec` each round in one Verify step, then drops what a round rejected from both (plain by
// RewindRow too, so the two caches stay alike). Every Verify row must equal its Decode step's
// logits bit for bit. Returns the number of rows compared.
int64_t CompareRounds(Session& plain, Session& spec, int64_t vocab, std::mt19937& rng, const std::string& what) {
  // Up to 14 rows: past the token counts where Linear would switch to a GEMM (10 for weights
  // without panels, 12 for quantized ones) if the step did not ask for rows as steps.
  std::uniform_int_distribution<int32_t> tok(0, 80), len(1, 14);
  std::vector<float> one(vocab), rows(16 * vocab);
  int64_t compared = 0;
  for (int round = 0; round < 6; ++round) {
    const int64_t n = len(rng);
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = tok(rng);
    EXPECT_TRUE(spec.Verify(t.data(), n, rows.data(), nullptr).ok()) << what;
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t active = 1;
      EXPECT_TRUE(plain.Decode(&t[i], &active, one.data()).ok()) << what;
      const bool same = std::memcmp(one.data(), rows.data() + i * vocab, vocab * sizeof(float)) == 0;
      EXPECT_TRUE(same) << what << ": round " << round << ", row " << i << " of " << n;
      if (!same) return compared;
      ++compared;
    }
    const int64_t rejected = std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
    EXPECT_TRUE(spec.RewindRow(0, rejected).ok()) << what;
    EXPECT_TRUE(plain.RewindRow(0, rejected).ok()) << what;
  }
  return compared;
}

void CheckModel(const model::GemmaModel& m, const Precision& pr, const std::string& what) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    // Prompts past one key tile and well past the sliding window, and a short one.
    for (int64_t prompt_len : {9, 150}) {
      std::mt19937 rng(static_cast<uint32_t>(prompt_len * 10 + threads));
      Prompt p;
      std::uniform_int_distribution<int32_t> tok(0, 80);
      for (int64_t i = 0; i < prompt_len; ++i) p.tokens.push_back(tok(rng));
      auto plain = NewSession(m, pr, &pool);
      auto spec = NewSession(m, pr, &pool);
      ASSERT_TRUE(plain && spec);
      std::vector<float> a(m.arch().vocab), b(m.arch().vocab);
      ASSERT_TRUE(plain->Prefill({p}, a.data()).ok());
      ASSERT_TRUE(spec->Prefill({p}, b.data()).ok());
      const std::string at = what + ", " + std::to_string(threads) + " threads, prompt " + std::to_string(prompt_len);
      EXPECT_GT(CompareRounds(*plain, *spec, m.arch().vocab, rng, at), 6) << at;
    }
  }
}

TEST(SessionVerify, RowsEqualDecodeStepsOnTinyModels) {
  for (bool gemma4 : {true, false})
    for (int64_t shared : {0, 2}) {
      if (!gemma4 && shared) continue;
      testing::TinyModelOptions mo;
      mo.gemma4 = gemma4;
      mo.ple = gemma4;
      mo.shared_layers = shared;
      auto m = testing::MakeTinyModel(mo);
      const std::string what = std::string(gemma4 ? "gemma4" : "gemma3") + " shared " + std::to_string(shared);
      CheckModel(*m, {}, what + " f32");
      CheckModel(*m, {DType::kBF16, AttentionPrecision::kBf16, ops::MatmulPrecision::kF32}, what + " bf16 attention");
    }
}

TEST(SessionVerify, RowsEqualDecodeStepsOnCheckpoints) {
  for (const char* name : {"gemma3_text", "gemma4_text", "gemma4_moe"}) {
    auto m = model::LoadedModel::Load(kModels + name);
    ASSERT_TRUE(m.ok()) << m.status().message();
    CheckModel(m.value()->model(), {}, std::string(name) + " f32");
    model::WeightLoadOptions bf16;
    bf16.convert_to = DType::kBF16;
    bf16.pack_panels_for = ops::MatmulPrecision::kBf16;
    auto mb = model::LoadedModel::Load(kModels + name, bf16);
    ASSERT_TRUE(mb.ok()) << mb.status().message();
    CheckModel(mb.value()->model(), {DType::kBF16, AttentionPrecision::kBf16, ops::MatmulPrecision::kBf16},
               std::string(name) + " bf16");
    // bf16 weights as stored at precision f32 (no panels: Linear's row-dot or GEMM by token count).
    model::WeightLoadOptions stored;
    stored.convert_to = DType::kBF16;
    auto ms = model::LoadedModel::Load(kModels + name, stored);
    ASSERT_TRUE(ms.ok()) << ms.status().message();
    CheckModel(ms.value()->model(), {}, std::string(name) + " bf16 weights as stored");
  }
}

TEST(SessionVerify, RowsEqualDecodeStepsQuantized) {
  for (QuantizeFileType type :
       {QuantizeFileType::kQ8_0, QuantizeFileType::kQ4_0, QuantizeFileType::kQ4_K_M, QuantizeFileType::kQ5_K_M})
    for (const char* name : {"gemma4_text", "gemma4_moe"}) {
      model::WeightLoadOptions o;
      // (gemma4_moe at q4_k_m: 8 experts, so attn_output is Q5_K, on its rows Q5_1.)
      auto rewrite = QuantizeOnLoad(kModels + name, type, nullptr);
      ASSERT_TRUE(rewrite.ok()) << rewrite.status().message();
      o.rewrite_matrix = std::move(rewrite.value());
      auto m = model::LoadedModel::Load(kModels + name, o);
      ASSERT_TRUE(m.ok()) << m.status().message();
      CheckModel(m.value()->model(), {}, std::string(name) + " " + QuantizeFileTypeName(type));
    }
}

// A checkpoint of tests/models quantized on load to `type`, as --quantize does.
std::unique_ptr<model::LoadedModel> LoadQuantized(const std::string& name, QuantizeFileType type) {
  model::WeightLoadOptions o;
  auto rewrite = QuantizeOnLoad(kModels + name, type, nullptr);
  EXPECT_TRUE(rewrite.ok()) << rewrite.status().message();
  if (!rewrite.ok()) return nullptr;
  o.rewrite_matrix = std::move(rewrite.value());
  auto lm = model::LoadedModel::Load(kModels + name, o);
  EXPECT_TRUE(lm.ok()) << lm.status().message();
  return lm.ok() ? std::move(lm.value()) : nullptr;
}

// A session of `rows` rows of `context` tokens, chunks of up to 16.
std::unique_ptr<Session> RowsSession(const model::GemmaModel& m, int64_t rows, int64_t context, ThreadPool* pool) {
  SessionOptions so;
  so.max_context = context;
  so.max_chunk = 16;
  so.max_batch = rows;
  auto s = Session::Create(m, so, pool);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? std::move(s.value()) : nullptr;
}

// A decode step over many rows gives each row the bits it gets decoded alone (tessera serve's
// exactness with many streams), here with 13 rows of quantized weights: past the 12 tokens from
// which Linear would take the int8 GEMM. One-token prompts, so the prefill is such a step too.
TEST(SessionVerify, DecodeRowsEqualRowsAlone) {
  auto lm = LoadQuantized("gemma4_text", QuantizeFileType::kQ4_0);
  ASSERT_TRUE(lm);
  const model::GemmaModel& m = lm->model();
  const int64_t B = 13, V = m.arch().vocab, steps = 4;
  ThreadPool pool(2);
  auto batch = RowsSession(m, B, 16, &pool);
  ASSERT_TRUE(batch);
  std::vector<Prompt> prompts(B);
  std::vector<int32_t> tokens(steps * B);
  for (int64_t b = 0; b < B; ++b) prompts[b].tokens = {static_cast<int32_t>(3 + 5 * b)};
  for (int64_t i = 0; i < steps * B; ++i) tokens[i] = static_cast<int32_t>((i * 37) % 80);
  std::vector<float> all(B * V), one(V);
  ASSERT_TRUE(batch->Prefill(prompts, all.data()).ok());
  std::vector<std::vector<float>> batched(steps, std::vector<float>(B * V));
  for (int64_t s = 0; s < steps; ++s)
    ASSERT_TRUE(batch->Decode(tokens.data() + s * B, nullptr, batched[s].data()).ok());
  for (int64_t b = 0; b < B; ++b) {
    auto alone = RowsSession(m, 1, 16, &pool);
    ASSERT_TRUE(alone);
    ASSERT_TRUE(alone->Prefill({prompts[b]}, one.data()).ok());
    for (int64_t s = 0; s < steps; ++s) {
      ASSERT_TRUE(alone->Decode(tokens.data() + s * B + b, nullptr, one.data()).ok());
      EXPECT_EQ(std::memcmp(one.data(), batched[s].data() + b * V, V * sizeof(float)), 0)
          << "row " << b << ", decode step " << s;
    }
  }
}

// Session::Step with some rows decoding and others appending prompt chunks (tessera serve while a
// request joins): the one-token rows run as one decode step and each run of adjacent longer chunks
// as a step of its own, so no row is padded to another's chunk (the layers' token count says so) and
// every row's logits are the bits it gets stepping alone. Quantized weights, where a padded step
// would have taken the int8 GEMM for the decoding rows too.
TEST(SessionVerify, MixedStepRowsEqualRowsAloneWithoutPadding) {
  for (const char* name : {"gemma4_text", "gemma4_moe"}) {
    auto lm = LoadQuantized(name, QuantizeFileType::kQ4_0);
    ASSERT_TRUE(lm);
    const model::GemmaModel& m = lm->model();
    const int64_t B = 4, V = m.arch().vocab, L = m.arch().num_layers();
    // Tokens each row appends per step (0: sits the step out), and the layer-token count that step
    // costs: the decode rows [0, last one-token row] plus each longer chunk's own tokens.
    const std::vector<std::vector<int64_t>> counts = {{1, 1, 1, 1}, {1, 12, 0, 1}, {5, 1, 3, 1}, {0, 0, 7, 1}};
    const std::vector<int64_t> layer_tokens = {4, 4 + 12, 4 + 5 + 3, 4 + 7};
    std::vector<std::vector<int32_t>> tokens(B);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < 32; ++i) tokens[b].push_back(static_cast<int32_t>(3 + (b * 31 + i * 17) % 80));
    ThreadPool pool(2);
    auto mixed = RowsSession(m, B, 32, &pool);
    ASSERT_TRUE(mixed);
    mixed->set_skip_unread(false);  // every row's every token through every layer: a plain count
    std::vector<std::unique_ptr<Session>> alone;
    for (int64_t b = 0; b < B; ++b) {
      alone.push_back(RowsSession(m, 1, 32, &pool));
      ASSERT_TRUE(alone.back());
      alone.back()->set_skip_unread(false);  // as the mixed session: the same kernels for the same rows
    }
    std::vector<int64_t> done(B, 0);
    std::vector<float> logits(B * V), one(V);
    for (size_t step = 0; step < counts.size(); ++step) {
      std::vector<RowChunk> chunks(B);
      for (int64_t b = 0; b < B; ++b) chunks[b] = {tokens[b].data() + done[b], nullptr, nullptr, counts[step][b]};
      const int64_t before = mixed->counts().layer_tokens;
      ASSERT_TRUE(mixed->Step(chunks.data(), B, logits.data()).ok());
      EXPECT_EQ(mixed->counts().layer_tokens - before, L * layer_tokens[step]) << name << " step " << step;
      for (int64_t b = 0; b < B; ++b) {
        if (counts[step][b] == 0) continue;
        ASSERT_TRUE(alone[b]->Step(&chunks[b], 1, one.data()).ok());
        EXPECT_EQ(std::memcmp(one.data(), logits.data() + b * V, V * sizeof(float)), 0)
            << name << " row " << b << ", step " << step;
        done[b] += counts[step][b];
      }
    }
  }
}

}  // namespace
}  // namespace tessera::runtime
