// The public API (tessera/engine.h, tessera/requests.h) on a real checkpoint directory: load,
// describe, generate with streaming, and requests over one cache giving each request's tokens
// alone. Only public headers are included, as a program using the engine would.
#include <gtest/gtest.h>

#include <string>

#include "tessera/engine.h"
#include "tessera/requests.h"

namespace tessera {
namespace {

const std::string kModel = std::string(TESSERA_TESTDATA_DIR) + "/models/gemma4";

std::unique_ptr<Model> Load() {
  LoadOptions o;
  o.threads = 2;
  StatusOr<std::unique_ptr<Model>> m = Model::Load(kModel, o);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m).value() : nullptr;
}

// A text prompt, then `image` placeholders (one block), then text; rows of `hidden` per image token.
Prompt MakePrompt(const ModelInfo& info, int64_t before, int64_t image, int64_t after, std::vector<float>& embeds) {
  Prompt p;
  for (int64_t i = 0; i < before + image + after; ++i) {
    const bool img = i >= before && i < before + image;
    p.tokens.push_back(img ? *info.image_token_id : static_cast<int32_t>(10 + (i * 37) % 400));
    p.token_types.push_back(img ? 1 : 0);
  }
  embeds.assign(image * info.hidden, 0.0f);
  for (size_t i = 0; i < embeds.size(); ++i) embeds[i] = static_cast<float>((i * 7919) % 13) / 13.0f - 0.5f;
  p.image_embeds = embeds.data();
  p.image_rows = image;
  return p;
}

TEST(EngineApi, LoadDescribeAndGenerateWithStreaming) {
  std::unique_ptr<Model> m = Load();
  ASSERT_TRUE(m);
  const ModelInfo& info = m->info();
  EXPECT_EQ(info.model_type, "gemma4");
  ASSERT_FALSE(info.layers.empty());
  ASSERT_TRUE(info.image_token_id.has_value());
  EXPECT_EQ(info.layers[0].kind, "sliding");
  std::vector<float> embeds;
  const Prompt p = MakePrompt(info, 3, 4, 3, embeds);
  StatusOr<std::vector<TileCensus>> tiles = m->PrefillTiles(p);
  ASSERT_TRUE(tiles.ok()) << tiles.status().message();
  EXPECT_EQ(tiles.value().size(), info.layers.size());
  SessionOptions so;
  so.max_context = 32;
  so.max_chunk = 8;
  ASSERT_TRUE(m->CheckSession(so).ok());
  StatusOr<size_t> kv = m->KvCacheBytes(so);
  ASSERT_TRUE(kv.ok());
  StatusOr<std::unique_ptr<Session>> s = m->NewSession(so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s.value()->memory().kv_cache, kv.value());
  GenerateOptions g;
  g.max_new_tokens = 6;
  std::vector<int32_t> streamed;
  g.on_token = [&](int64_t row, int32_t token) {
    EXPECT_EQ(row, 0);
    streamed.push_back(token);
    return true;
  };
  GenerateOutput out;
  ASSERT_TRUE(s.value()->Generate({p}, g, &out).ok());
  EXPECT_EQ(out.rows[0].tokens, streamed);
  EXPECT_EQ(out.rows[0].tokens.size(), 6u);
  EXPECT_EQ(out.stats.prompt_tokens, 10);
  EXPECT_GT(out.stats.prefill_seconds, 0.0);
  EXPECT_EQ(s.value()->position(0), 15);  // 10 prompt + 5 fed back
}

TEST(EngineApi, RequestBatchGivesEachRequestItsTokensAlone) {
  std::unique_ptr<Model> m = Load();
  ASSERT_TRUE(m);
  SessionOptions so;
  so.max_context = 40;
  so.max_chunk = 8;
  std::vector<std::vector<float>> embeds(3);
  std::vector<Prompt> prompts = {MakePrompt(m->info(), 2, 0, 9, embeds[0]), MakePrompt(m->info(), 3, 6, 4, embeds[1]),
                                 MakePrompt(m->info(), 12, 0, 5, embeds[2])};
  GenerateOptions g;
  g.max_new_tokens = 7;
  std::vector<std::vector<int32_t>> alone;
  for (const Prompt& p : prompts) {
    auto s = m->NewSession(so);
    GenerateOutput out;
    ASSERT_TRUE(s.value()->Generate({p}, g, &out).ok());
    alone.push_back(out.rows[0].tokens);
  }
  so.max_batch = 2;  // three requests, two slots: the third joins when the first leaves
  StatusOr<std::unique_ptr<RequestBatch>> batch = RequestBatch::Create(*m, so);
  ASSERT_TRUE(batch.ok()) << batch.status().message();
  RequestBatch& b = *batch.value();
  std::vector<RequestId> ids;
  ids.push_back(b.Add(prompts[0], g).value());
  ASSERT_TRUE(b.Step().ok());
  ASSERT_TRUE(b.Step().ok());
  ids.push_back(b.Add(prompts[1], g).value());  // joins while the first decodes
  EXPECT_EQ(b.Add(prompts[2], g).status().code(), StatusCode::kResourceExhausted);
  while (b.running() == 2) ASSERT_TRUE(b.Step().ok());
  ids.push_back(b.Add(prompts[2], g).value());
  while (b.running() > 0) ASSERT_TRUE(b.Step().ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    StatusOr<RequestResult> r = b.Take(ids[i]);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_TRUE(r.value().status.ok());
    EXPECT_EQ(r.value().output.tokens, alone[i]) << "request " << i;
  }
}

}  // namespace
}  // namespace tessera
