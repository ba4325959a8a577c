// The Gemma 4 assistant drafter and greedy speculative generation (docs/speculative.md) on the
// tiny gemma4_text checkpoint and the drafters of python/scripts/make_tiny_drafters.py: drafted
// logits against transformers' Gemma4AssistantForCausalLM, generated tokens against plain
// greedy decoding and transformers' assisted generate(), and the config's refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/drafter.h"
#include "model/loaded_model.h"
#include "runtime/speculative.h"
#include "tessera/npy.h"

namespace tessera {
namespace {

const std::string kModels = std::string(TESSERA_TESTDATA_DIR) + "/models/";

std::vector<float> Npy(const std::string& drafter, const std::string& key, std::vector<int64_t>* shape = nullptr) {
  StatusOr<io::NpyArray> a = io::ReadNpy(kModels + drafter + "/draft_golden/" + key + ".npy");
  EXPECT_TRUE(a.ok()) << a.status().message();
  if (!a.ok()) return {};
  if (shape) *shape = a.value().shape;
  return a.value().data;
}

std::vector<int32_t> Ints(const std::vector<float>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

std::unique_ptr<runtime::Session> NewSession(const model::GemmaModel& m, int64_t verify) {
  SessionOptions o;
  o.max_context = 128;
  o.max_chunk = 16;
  o.verify_tokens = verify;
  auto s = runtime::Session::Create(m, o, nullptr);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return std::move(s.value());
}

Prompt TextPrompt(const std::vector<int32_t>& tokens) {
  Prompt p;
  p.tokens = tokens;
  return p;
}

int32_t Argmax(const std::vector<float>& x) { return static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin()); }

// Plain greedy decoding: prefill, then one token per step.
std::vector<int32_t> Greedy(runtime::Session& s, const std::vector<int32_t>& prompt, int64_t n) {
  std::vector<float> logits(s.model().arch().vocab);
  EXPECT_TRUE(s.ClearRow(0).ok());
  EXPECT_TRUE(s.Prefill({TextPrompt(prompt)}, logits.data()).ok());
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(Argmax(logits));
    if (i + 1 < n) {
      EXPECT_TRUE(s.Decode(&out.back(), nullptr, logits.data()).ok());
    }
  }
  return out;
}

class Speculative : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = model::LoadedModel::Load(kModels + "gemma4_text");
    ASSERT_TRUE(m.ok()) << m.status().message();
    main_ = std::move(m.value());
  }
  std::unique_ptr<model::Drafter> Drafter(const std::string& name) {
    auto d = model::Drafter::Load(kModels + name, main_->model());
    EXPECT_TRUE(d.ok()) << d.status().message();
    return d.ok() ? std::move(d.value()) : nullptr;
  }
  std::unique_ptr<model::LoadedModel> main_;
};

// Four draft steps after a prompt, against transformers' drafter on the same K/V and hidden state:
// a 14-token prompt (the sliding layers see only the W + 1 = 9 newest positions) and a 6-token one.
TEST_F(Speculative, DraftLogitsMatchTransformers) {
  auto d = Drafter("gemma4_assistant");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->source_layer(0), 3);  // sliding: the main model's last non-shared sliding layer
  EXPECT_EQ(d->source_layer(1), 1);  // full
  const int64_t V = main_->model().arch().vocab, H = main_->model().arch().hidden;
  for (const char* c : {"case0", "case1"}) {
    SCOPED_TRACE(c);
    const std::vector<int32_t> prompt = Ints(Npy("gemma4_assistant", std::string(c) + "_prompt"));
    const int32_t first = Ints(Npy("gemma4_assistant", std::string(c) + "_first"))[0];
    const std::vector<int32_t> want_tokens = Ints(Npy("gemma4_assistant", std::string(c) + "_draft_tokens"));
    std::vector<int64_t> shape;
    const std::vector<float> want = Npy("gemma4_assistant", std::string(c) + "_draft_logits", &shape);
    ASSERT_EQ(shape, (std::vector<int64_t>{4, V}));
    auto s = NewSession(main_->model(), 5);
    std::vector<float> logits(V);
    ASSERT_TRUE(s->Prefill({TextPrompt(prompt)}, logits.data()).ok());
    ASSERT_EQ(Argmax(logits), first);
    std::vector<float> state(s->last_hidden(0), s->last_hidden(0) + H);
    auto scratch = d->NewScratch(s->cache(), nullptr);
    ASSERT_TRUE(scratch.ok());
    int32_t token = first;
    for (int64_t j = 0; j < 4; ++j) {
      ASSERT_TRUE(d->Step(s->cache(), 0, token, static_cast<int32_t>(prompt.size()), state.data(), logits.data(),
                          state.data(), *scratch.value(), nullptr)
                      .ok());
      double worst = 0;
      for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(double(logits[v]) - want[j * V + v]));
      EXPECT_LT(worst, 1e-4) << "step " << j;
      token = Argmax(logits);
      EXPECT_EQ(token, want_tokens[j]) << "step " << j;
    }
  }
}

// Greedy speculative output equals plain greedy decoding for every k, with a drafter that is
// right sometimes (acceptance strictly between 0 and 1) and one that is almost never right; and
// equals transformers' assisted generate() tokens.
TEST_F(Speculative, GreedyEqualsPlainDecoding) {
  const std::vector<int32_t> prompt = {2, 194, 85, 418, 371, 196, 220, 385, 382, 299};  // gemma4_text gen_prompt
  const std::vector<int32_t> assisted = Ints(Npy("gemma4_assistant_copy", "assisted_tokens"));
  ASSERT_EQ(assisted.size(), 32u);
  auto plain_session = NewSession(main_->model(), 1);
  const std::vector<int32_t> plain = Greedy(*plain_session, prompt, 32);
  EXPECT_EQ(plain, assisted);
  for (const char* name : {"gemma4_assistant_copy", "gemma4_assistant"}) {
    auto d = Drafter(name);
    ASSERT_NE(d, nullptr);
    for (int64_t k : {1, 2, 4, 7}) {
      SCOPED_TRACE(std::string(name) + " k=" + std::to_string(k));
      auto s = NewSession(main_->model(), k + 1);
      runtime::SpeculativeOptions o;
      o.draft_tokens = k;
      o.max_new_tokens = 32;
      std::vector<int32_t> out;
      runtime::SpeculativeStats st;
      Status r = runtime::SpeculativeGenerate(*s, *d, TextPrompt(prompt), o, nullptr, &out, &st);
      ASSERT_TRUE(r.ok()) << r.message();
      EXPECT_EQ(out, plain);
      EXPECT_GT(st.rounds, 0);
      if (std::string(name) == "gemma4_assistant_copy") {
        EXPECT_GT(st.acceptance(), 0.0);
        EXPECT_LT(st.acceptance(), 1.0);
        EXPECT_LT(st.rounds, 32);  // accepted drafts save main-model steps
      }
    }
  }
}

TEST_F(Speculative, StopsAtStopTokenAndMaxTokens) {
  const std::vector<int32_t> prompt = {2, 194, 85, 418, 371, 196, 220, 385, 382, 299};
  auto plain_session = NewSession(main_->model(), 1);
  const std::vector<int32_t> plain = Greedy(*plain_session, prompt, 32);
  auto d = Drafter("gemma4_assistant_copy");
  ASSERT_NE(d, nullptr);
  auto s = NewSession(main_->model(), 5);
  runtime::SpeculativeOptions o;
  o.draft_tokens = 4;
  o.max_new_tokens = 32;
  o.stop_tokens = {plain[6]};  // 284 first appears at index 1
  std::vector<int32_t> out;
  runtime::SpeculativeStats st;
  ASSERT_TRUE(runtime::SpeculativeGenerate(*s, *d, TextPrompt(prompt), o, nullptr, &out, &st).ok());
  const auto first = std::find(plain.begin(), plain.end(), plain[6]);
  EXPECT_EQ(out, std::vector<int32_t>(plain.begin(), first + 1));
  for (int64_t n : {1, 3, 5, 9}) {
    o.stop_tokens.clear();
    o.max_new_tokens = n;
    ASSERT_TRUE(runtime::SpeculativeGenerate(*s, *d, TextPrompt(prompt), o, nullptr, &out, &st).ok());
    EXPECT_EQ(out, std::vector<int32_t>(plain.begin(), plain.begin() + n)) << n;
  }
}

TEST(DrafterConfig, RefusesWhatItDoesNotImplement) {
  const std::string text =
      R"("text_config": {"model_type": "gemma4_text", "hidden_size": 32, "intermediate_size": 64,
         "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"],
         "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0, "vocab_size": 512})";
  auto ok = model::ParseDrafterConfig(R"({"model_type": "gemma4_assistant", "backbone_hidden_size": 64, )" + text + "}");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok.value().backbone_hidden_size, 64);
  EXPECT_EQ(ok.value().text.num_hidden_layers, 2);
  auto ordered = model::ParseDrafterConfig(R"({"model_type": "gemma4_assistant", "use_ordered_embeddings": true, )" +
                                           text + "}");
  ASSERT_FALSE(ordered.ok());
  EXPECT_EQ(ordered.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(ordered.status().message().find("use_ordered_embeddings"), std::string::npos);
  auto type = model::ParseDrafterConfig(R"({"model_type": "gemma4_text", )" + text + "}");
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find("model_type"), std::string::npos);
  std::string partly = text;
  partly.replace(partly.find("\"vocab_size\": 512"), 17, "\"vocab_size\": 512, \"num_kv_shared_layers\": 1");
  auto shared = model::ParseDrafterConfig(R"({"model_type": "gemma4_assistant", )" + partly + "}");
  ASSERT_FALSE(shared.ok());
  EXPECT_NE(shared.status().message().find("text_config.num_kv_shared_layers"), std::string::npos);
  std::string ple = text;
  ple.replace(ple.find("\"hidden_size_per_layer_input\": 0"), 32, "\"hidden_size_per_layer_input\": 8");
  auto p = model::ParseDrafterConfig(R"({"model_type": "gemma4_assistant", )" + ple + "}");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("text_config.hidden_size_per_layer_input"), std::string::npos);
  auto notext = model::ParseDrafterConfig(R"({"model_type": "gemma4_assistant"})");
  ASSERT_FALSE(notext.ok());
  EXPECT_NE(notext.status().message().find("text_config"), std::string::npos);
  EXPECT_FALSE(model::ParseDrafterConfig("[1, 2]").ok());
  EXPECT_FALSE(model::ParseDrafterConfig("{").ok());
}

// A drafter whose attention geometry does not match the main model's is refused at load.
TEST_F(Speculative, RefusesMismatchedBackbone) {
  auto other = model::LoadedModel::Load(kModels + "gemma4_unified");
  ASSERT_TRUE(other.ok());
  auto d = model::Drafter::Load(kModels + "gemma4_assistant", other.value()->model());
  ASSERT_FALSE(d.ok());
  // Same widths and vocabulary, but its sliding layers use window 4, the drafter's 8.
  EXPECT_NE(d.status().message().find("sliding_window"), std::string::npos) << d.status().message();
}

}  // namespace
}  // namespace tessera
