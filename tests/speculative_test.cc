// The Gemma 4 assistant drafter and greedy speculative generation (docs/speculative.md) on the
// tiny gemma4_text checkpoint and the drafters of python/scripts/make_tiny_drafters.py: drafted
// logits against transformers' Gemma4AssistantForCausalLM, generated tokens against plain
// greedy decoding and transformers' assisted generate(), and the config's refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/drafter.h"
#include "model/loaded_model.h"
#include "runtime/generator.h"
#include "runtime/quantize_model_meta.h"
#include "runtime/speculative.h"
#include "tessera/engine.h"
#include "tessera/quantize.h"
#include "temp_dir.h"
#include "tessera/npy.h"
#include "tessera/thread_pool.h"

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

// Speculative generation through runtime::GenerateSpeculative: one prompt, greedy.
GenerateOutput Speculate(runtime::Session& s, const model::Drafter& d, const std::vector<int32_t>& prompt, int64_t k,
                         int64_t max_new, std::vector<int32_t> stop = {}) {
  GenerateOptions o;
  o.draft_tokens = k;
  o.max_new_tokens = max_new;
  o.stop_tokens = std::move(stop);
  GenerateOutput out;
  Status r = runtime::GenerateSpeculative(s, d, {TextPrompt(prompt)}, o, &out);
  EXPECT_TRUE(r.ok()) << r.message();
  return out;
}

const std::vector<int32_t> kGenPrompt = {2, 194, 85, 418, 371, 196, 220, 385, 382, 299};  // gemma4_text gen_prompt

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

// Four draft steps after each golden prompt of `name`, against transformers' drafter on the same
// K/V and hidden state.
void CheckDraftGoldens(const model::GemmaModel& main, const model::Drafter& d, const std::string& name,
                       const std::vector<std::string>& cases) {
  const int64_t V = main.arch().vocab, H = main.arch().hidden;
  for (const std::string& c : cases) {
    SCOPED_TRACE(name + " " + c);
    const std::vector<int32_t> prompt = Ints(Npy(name, c + "_prompt"));
    const int32_t first = Ints(Npy(name, c + "_first"))[0];
    const std::vector<int32_t> want_tokens = Ints(Npy(name, c + "_draft_tokens"));
    std::vector<int64_t> shape;
    const std::vector<float> want = Npy(name, c + "_draft_logits", &shape);
    ASSERT_EQ(shape, (std::vector<int64_t>{4, V}));
    auto s = NewSession(main, 5);
    std::vector<float> logits(V);
    ASSERT_TRUE(s->Prefill({TextPrompt(prompt)}, logits.data()).ok());
    ASSERT_EQ(Argmax(logits), first);
    std::vector<float> state(s->last_hidden(0), s->last_hidden(0) + H);
    auto scratch = d.NewScratch(s->cache(), nullptr);
    ASSERT_TRUE(scratch.ok());
    int32_t token = first;
    for (int64_t j = 0; j < 4; ++j) {
      ASSERT_TRUE(d.Step(s->cache(), 0, token, static_cast<int32_t>(prompt.size()), state.data(), logits.data(),
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

// The largest error of four draft steps' logits against transformers' goldens of `name`/`c`,
// relative to the goldens' largest |logit|; each step fed the golden draft token, so a quantized
// drafter is compared step by step even where its own argmax would differ. Non-finite: infinity.
double DraftLogitsError(const model::GemmaModel& main, const model::Drafter& d, const std::string& name,
                        const std::string& c) {
  const int64_t V = main.arch().vocab, H = main.arch().hidden;
  const std::vector<int32_t> prompt = Ints(Npy(name, c + "_prompt"));
  const std::vector<int32_t> want_tokens = Ints(Npy(name, c + "_draft_tokens"));
  const std::vector<float> want = Npy(name, c + "_draft_logits");
  auto s = NewSession(main, 5);
  std::vector<float> logits(V);
  EXPECT_TRUE(s->Prefill({TextPrompt(prompt)}, logits.data()).ok());
  std::vector<float> state(s->last_hidden(0), s->last_hidden(0) + H);
  auto scratch = d.NewScratch(s->cache(), nullptr);
  EXPECT_TRUE(scratch.ok());
  int32_t token = Ints(Npy(name, c + "_first"))[0];
  double worst = 0, top = 0;
  for (int64_t j = 0; j < 4; ++j) {
    EXPECT_TRUE(d.Step(s->cache(), 0, token, static_cast<int32_t>(prompt.size()), state.data(), logits.data(),
                       state.data(), *scratch.value(), nullptr)
                    .ok());
    // An ordered head gives every token it did not score its row's minimum (the smallest score
    // minus one): compare the tokens both scored, as a quantized drafter may pick other clusters.
    const float* w = want.data() + j * V;
    const float low = *std::min_element(w, w + V), mine = *std::min_element(logits.begin(), logits.end());
    for (int64_t v = 0; v < V; ++v) {
      if (!std::isfinite(logits[v])) return INFINITY;
      if (w[v] == low || logits[v] == mine) continue;
      worst = std::max(worst, std::fabs(double(logits[v]) - w[v]));
      top = std::max(top, std::fabs(double(w[v])));
    }
    token = want_tokens[j];
  }
  return worst / top;
}

// Quantized at load (runtime::QuantizeDrafterOnLoad, as LoadOptions::draft_quantize): the drafter's
// logits move off transformers' f32 ones (its weights changed), but stay near them. The bounds are
// not a precision claim (that would need a dequantized reference): a block read with the wrong
// layout, scale or type gives errors of the order of the logits themselves.
TEST_F(Speculative, QuantizedDrafterLogitsNearTransformers) {
  for (const char* name : {"gemma4_assistant", "gemma4_assistant_ordered"}) {
    auto plain = Drafter(name);
    ASSERT_NE(plain, nullptr);
    const double exact = DraftLogitsError(main_->model(), *plain, name, "case0");
    for (auto [type, bound] : {std::pair{QuantizeFileType::kQ8_0, 0.1}, std::pair{QuantizeFileType::kQ4_0, 0.4}}) {
      SCOPED_TRACE(std::string(name) + " " + QuantizeFileTypeName(type));
      model::WeightLoadOptions wo;
      auto rewrite = QuantizeDrafterOnLoad(type, nullptr);
      ASSERT_TRUE(rewrite.ok()) << rewrite.status().message();
      wo.rewrite_matrix = rewrite.value();
      auto d = model::Drafter::Load(kModels + name, main_->model(), wo);
      ASSERT_TRUE(d.ok()) << d.status().message();
      const double err = DraftLogitsError(main_->model(), *d.value(), name, "case0");
      std::printf("%s %s drafter: logits error %.3g of the largest (f32: %.3g)\n", name, QuantizeFileTypeName(type), err,
                  exact);
      EXPECT_GT(err, 10 * exact);  // quantized: its weights changed
      EXPECT_LT(err, bound);
    }
  }
}

// The head goes through the load's rewrite too; under use_ordered_embeddings after it is clustered.
// (The tiny drafters' width, 48, is no whole number of 32-value blocks, so a quantizing rewrite
// leaves their heads as stored: a rewrite to f16 shows where the head's rewrite happens.)
TEST_F(Speculative, DrafterHeadTakesTheRewrite) {
  model::WeightLoadOptions wo;
  wo.rewrite_matrix = [](const std::string&, const model::StoredTensor& s,
                         std::vector<AlignedBuffer>* keep) -> StatusOr<model::StoredTensor> {
    if (s.dtype != DType::kF32 || s.quant != QuantType::kNone) return s;
    const int64_t n = s.shape[0] * s.shape[1];
    keep->emplace_back(static_cast<size_t>(n * 2));
    auto* h = static_cast<uint16_t*>(keep->back().data());
    for (int64_t i = 0; i < n; ++i) h[i] = F32ToF16(static_cast<const float*>(s.data)[i]);
    model::StoredTensor r = s;
    r.data = h, r.dtype = DType::kF16, r.nbytes = static_cast<uint64_t>(n * 2);
    return r;
  };
  for (const char* name : {"gemma4_assistant", "gemma4_assistant_ordered"}) {
    SCOPED_TRACE(name);
    auto plain = Drafter(name);
    ASSERT_NE(plain, nullptr);
    auto d = model::Drafter::Load(kModels + name, main_->model(), wo);
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_EQ(plain->head().dtype, DType::kF32);
    EXPECT_EQ(d.value()->head().dtype, DType::kF16);
    const double err = DraftLogitsError(main_->model(), *d.value(), name, "case0");
    EXPECT_GT(err, 0.0);
    EXPECT_LT(err, 1e-2);  // f16 weights: 11-bit significands
  }
}

// A 14-token prompt (the sliding layers see only the W + 1 = 9 newest positions) and a 6-token one.
TEST_F(Speculative, DraftLogitsMatchTransformers) {
  auto d = Drafter("gemma4_assistant");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->source_layer(0), 3);  // sliding: the main model's last non-shared sliding layer
  EXPECT_EQ(d->source_layer(1), 1);  // full
  CheckDraftGoldens(main_->model(), *d, "gemma4_assistant", {"case0", "case1"});
}

// use_ordered_embeddings: only the top-4 of 16 clusters' tokens scored, the rest at the smallest
// score minus one, as transformers' masked embedder; tested with and without a pool.
TEST_F(Speculative, OrderedEmbeddingsMatchTransformers) {
  auto d = Drafter("gemma4_assistant_ordered");
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(d->config().ordered_embeddings);
  CheckDraftGoldens(main_->model(), *d, "gemma4_assistant_ordered", {"case0"});
  // The same steps on two threads: the clusters are scored in parallel.
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = Ints(Npy("gemma4_assistant_ordered", "case0_prompt"));
  const int64_t V = main_->model().arch().vocab, H = main_->model().arch().hidden;
  const std::vector<float> want = Npy("gemma4_assistant_ordered", "case0_draft_logits");
  auto s = NewSession(main_->model(), 5);
  std::vector<float> logits(V);
  ASSERT_TRUE(s->Prefill({TextPrompt(prompt)}, logits.data()).ok());
  std::vector<float> state(s->last_hidden(0), s->last_hidden(0) + H);
  auto scratch = d->NewScratch(s->cache(), &pool);
  ASSERT_TRUE(scratch.ok());
  ASSERT_TRUE(d->Step(s->cache(), 0, Argmax(logits), static_cast<int32_t>(prompt.size()), state.data(), logits.data(),
                      state.data(), *scratch.value(), &pool)
                  .ok());
  for (int64_t v = 0; v < V; ++v) ASSERT_NEAR(logits[v], want[v], 1e-4) << v;
  // Speculative generation with it still equals plain greedy decoding.
  auto plain_session = NewSession(main_->model(), 1);
  const std::vector<int32_t> plain = Greedy(*plain_session, kGenPrompt, 24);
  for (int64_t k : {1, 3}) {
    auto sk = NewSession(main_->model(), k + 1);
    EXPECT_EQ(Speculate(*sk, *d, kGenPrompt, k, 24).rows[0].tokens, plain) << "k=" << k;
  }
}

// A token_ordering that is not a permutation of the vocabulary is refused at load, naming it.
TEST_F(Speculative, OrderedEmbeddingsRefuseABadTokenOrdering) {
  const std::string src = kModels + "gemma4_assistant_ordered/";
  std::ifstream in(src + "model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 8u);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.substr(8, header_len));
  const auto& e = header.at("masked_embedding.token_ordering");
  ASSERT_EQ(e.at("dtype"), "I64");
  const size_t at = 8 + header_len + e.at("data_offsets")[0].get<size_t>();
  testing::TempDir dir("tessera_ordered");
  std::ifstream cfg(src + "config.json");
  testing::WriteText(dir.File("config.json"), std::string((std::istreambuf_iterator<char>(cfg)), std::istreambuf_iterator<char>()));
  std::string dup = bytes;
  std::memcpy(dup.data() + at + 8, dup.data() + at, 8);  // token_ordering[1] = token_ordering[0]
  testing::WriteText(dir.File("model.safetensors"), dup);
  auto d = model::Drafter::Load(dir.path(), main_->model());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("masked_embedding.token_ordering"), std::string::npos) << d.status().message();
  EXPECT_NE(d.status().message().find("twice"), std::string::npos) << d.status().message();
  std::string out = bytes;
  const int64_t big = 512;  // == vocab: out of range
  std::memcpy(out.data() + at, &big, 8);
  testing::WriteText(dir.File("model.safetensors"), out);
  d = model::Drafter::Load(dir.path(), main_->model());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("outside [0, 512)"), std::string::npos) << d.status().message();
}


// Greedy speculative output equals plain greedy decoding for every k, with a drafter that is
// right sometimes (acceptance strictly between 0 and 1) and one that is almost never right; and
// equals transformers' assisted generate() tokens.
TEST_F(Speculative, GreedyEqualsPlainDecoding) {
  const std::vector<int32_t> assisted = Ints(Npy("gemma4_assistant_copy", "assisted_tokens"));
  ASSERT_EQ(assisted.size(), 32u);
  auto plain_session = NewSession(main_->model(), 1);
  const std::vector<int32_t> plain = Greedy(*plain_session, kGenPrompt, 32);
  EXPECT_EQ(plain, assisted);
  for (const char* name : {"gemma4_assistant_copy", "gemma4_assistant"}) {
    auto d = Drafter(name);
    ASSERT_NE(d, nullptr);
    for (int64_t k : {1, 2, 4, 7}) {
      SCOPED_TRACE(std::string(name) + " k=" + std::to_string(k));
      auto s = NewSession(main_->model(), k + 1);
      const GenerateOutput out = Speculate(*s, *d, kGenPrompt, k, 32);
      ASSERT_EQ(out.rows.size(), 1u);
      EXPECT_EQ(out.rows[0].tokens, plain);
      EXPECT_EQ(out.rows[0].finish, FinishReason::kLength);
      EXPECT_GT(out.stats.decode_steps, 0);
      EXPECT_GT(out.stats.drafted_tokens, 0);
      if (std::string(name) == "gemma4_assistant_copy") {
        EXPECT_GT(out.stats.accepted_tokens, 0);
        EXPECT_LT(out.stats.accepted_tokens, out.stats.drafted_tokens);
        EXPECT_LT(out.stats.decode_steps, 31);  // accepted drafts save main-model steps
      }
    }
  }
}

TEST_F(Speculative, StopsAtStopTokenMaxTokensAndContext) {
  auto plain_session = NewSession(main_->model(), 1);
  const std::vector<int32_t> plain = Greedy(*plain_session, kGenPrompt, 32);
  auto d = Drafter("gemma4_assistant_copy");
  ASSERT_NE(d, nullptr);
  auto s = NewSession(main_->model(), 5);
  GenerateOutput out = Speculate(*s, *d, kGenPrompt, 4, 32, {plain[6]});
  const auto first = std::find(plain.begin(), plain.end(), plain[6]);
  EXPECT_EQ(out.rows[0].tokens, std::vector<int32_t>(plain.begin(), first + 1));
  EXPECT_EQ(out.rows[0].finish, FinishReason::kStop);
  for (int64_t n : {0, 1, 3, 5, 9}) {
    out = Speculate(*s, *d, kGenPrompt, 4, n);
    EXPECT_EQ(out.rows[0].tokens, std::vector<int32_t>(plain.begin(), plain.begin() + n)) << n;
  }
  // max_context 20 holds the 10 prompt tokens and 10 more: the 11th new token has no room.
  SessionOptions o;
  o.max_context = 20;
  o.max_chunk = 16;
  o.verify_tokens = 5;
  auto small = runtime::Session::Create(main_->model(), o, nullptr);
  ASSERT_TRUE(small.ok());
  GenerateOptions g;
  g.max_new_tokens = 32;
  GenerateOutput want;
  ASSERT_TRUE(runtime::Generate(*small.value(), {TextPrompt(kGenPrompt)}, g, &want).ok());
  out = Speculate(*small.value(), *d, kGenPrompt, 4, 32);
  EXPECT_EQ(out.rows[0].tokens, want.rows[0].tokens);
  EXPECT_EQ(out.rows[0].tokens, std::vector<int32_t>(plain.begin(), plain.begin() + 11));
  EXPECT_EQ(out.rows[0].finish, FinishReason::kContext);
  EXPECT_EQ(want.rows[0].finish, FinishReason::kContext);
}

TEST_F(Speculative, RefusesWhatItCannotDo) {
  auto d = Drafter("gemma4_assistant_copy");
  ASSERT_NE(d, nullptr);
  auto s = NewSession(main_->model(), 3);
  GenerateOptions o;
  o.draft_tokens = 3;  // needs verify_tokens 4
  GenerateOutput out;
  Status r = runtime::GenerateSpeculative(*s, *d, {TextPrompt(kGenPrompt)}, o, &out);
  EXPECT_NE(r.message().find("verify_tokens"), std::string::npos) << r.message();
  o.draft_tokens = 2;
  r = runtime::GenerateSpeculative(*s, *d, {TextPrompt(kGenPrompt), TextPrompt(kGenPrompt)}, o, &out);
  EXPECT_NE(r.message().find("one prompt"), std::string::npos) << r.message();
}

// The processed distribution Sampler draws from, computed here independently: softmax at the
// temperature over the top-k logits.
std::vector<std::pair<int32_t, double>> TopK(const std::vector<float>& logits, int64_t k, double temperature) {
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<std::pair<int32_t, double>> out;
  double total = 0;
  for (int64_t i = 0; i < k; ++i) total += std::exp((logits[ids[i]] - logits[ids[0]]) / temperature);
  for (int64_t i = 0; i < k; ++i) out.push_back({ids[i], std::exp((logits[ids[i]] - logits[ids[0]]) / temperature) / total});
  return out;
}

// With sampling, speculative generation draws the first three tokens from exactly the model's own
// joint distribution (top-k 4, temperature 1.5): a chi-square goodness-of-fit test of 4000 seeded
// runs against the exact joint probabilities, computed from the model's logits after each prefix.
TEST_F(Speculative, SamplingPreservesTheDistribution) {
  const int64_t K = 4, V = main_->model().arch().vocab;
  const double T = 1.5;
  auto plain = NewSession(main_->model(), 1);
  std::vector<float> logits(V);
  auto dist = [&](std::vector<int32_t> prefix) {
    EXPECT_TRUE(plain->ClearRow(0).ok());
    EXPECT_TRUE(plain->Prefill({TextPrompt(prefix)}, logits.data()).ok());
    return TopK(logits, K, T);
  };
  std::map<std::vector<int32_t>, double> exact;  // (t1, t2, t3) -> probability
  std::vector<int32_t> p = kGenPrompt;
  for (auto [t1, p1] : dist(p)) {
    p.push_back(t1);
    for (auto [t2, p2] : dist(p)) {
      p.push_back(t2);
      for (auto [t3, p3] : dist(p)) exact[{t1, t2, t3}] += p1 * p2 * p3;
      p.pop_back();
    }
    p.pop_back();
  }
  auto d = Drafter("gemma4_assistant_copy");
  ASSERT_NE(d, nullptr);
  auto s = NewSession(main_->model(), 3);
  std::map<std::vector<int32_t>, int64_t> seen;
  const int64_t N = 4000;
  int64_t drafted = 0, accepted = 0;
  for (int64_t i = 0; i < N; ++i) {
    GenerateOptions o;
    o.draft_tokens = 2;
    o.max_new_tokens = 3;
    o.sampling = {static_cast<float>(T), K, 1.0f, static_cast<uint64_t>(1000 + i)};
    GenerateOutput out;
    ASSERT_TRUE(runtime::GenerateSpeculative(*s, *d, {TextPrompt(kGenPrompt)}, o, &out).ok());
    ASSERT_EQ(out.rows[0].tokens.size(), 3u);
    ++seen[out.rows[0].tokens];
    drafted += out.stats.drafted_tokens;
    accepted += out.stats.accepted_tokens;
  }
  EXPECT_GT(accepted, 0);  // both the accept and the reject branches ran
  EXPECT_LT(accepted, drafted);
  // Cells with expected count >= 5 on their own; the rest pooled into one cell.
  double chi2 = 0, pooled_expected = 0;
  int64_t pooled_seen = 0, cells = 0;
  for (const auto& [seq, prob] : exact) {
    const double e = prob * N;
    const int64_t o = seen.count(seq) ? seen[seq] : 0;
    if (e >= 5) {
      chi2 += (o - e) * (o - e) / e;
      ++cells;
    } else {
      pooled_expected += e, pooled_seen += o;
    }
  }
  for (const auto& [seq, count] : seen) EXPECT_TRUE(exact.count(seq)) << "a sequence outside the top-k support";
  if (pooled_expected > 0) chi2 += (pooled_seen - pooled_expected) * (pooled_seen - pooled_expected) / pooled_expected, ++cells;
  const double df = static_cast<double>(cells - 1);
  // Wilson-Hilferty: the chi-square quantile at p = 0.9995 (z = 3.29).
  const double crit = df * std::pow(1 - 2 / (9 * df) + 3.29 * std::sqrt(2 / (9 * df)), 3);
  EXPECT_LT(chi2, crit) << cells << " cells; acceptance " << double(accepted) / drafted;
  std::printf("chi2 %.1f over %lld cells (critical %.1f); acceptance %.3f\n", chi2, static_cast<long long>(cells), crit,
              double(accepted) / drafted);
}

// The public API: Model::Load with a drafter, Session::Generate with draft_tokens.
TEST(SpeculativeApi, GenerateWithDraft) {
  LoadOptions lo;
  lo.threads = 2;
  lo.draft = kModels + "gemma4_assistant_copy";
  auto m = Model::Load(kModels + "gemma4_text", lo);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(m.value()->info().draft);
  SessionOptions so;
  so.max_context = 64;
  so.max_chunk = 16;
  so.verify_tokens = 5;
  auto s = m.value()->NewSession(so);
  ASSERT_TRUE(s.ok());
  GenerateOptions g;
  g.max_new_tokens = 32;
  GenerateOutput plain, spec;
  ASSERT_TRUE(s.value()->Generate({TextPrompt(kGenPrompt)}, g, &plain).ok());
  g.draft_tokens = 4;
  std::vector<int32_t> streamed;
  g.on_token = [&](int64_t, int32_t t) { return streamed.push_back(t), true; };
  ASSERT_TRUE(s.value()->Generate({TextPrompt(kGenPrompt)}, g, &spec).ok());
  EXPECT_EQ(spec.rows[0].tokens, plain.rows[0].tokens);
  EXPECT_EQ(streamed, plain.rows[0].tokens);
  EXPECT_GT(spec.stats.accepted_tokens, 0);
  EXPECT_LT(spec.stats.decode_steps, plain.stats.decode_steps);
  EXPECT_GT(spec.stats.draft_seconds, 0.0);  // the drafter's share of the decode time
  EXPECT_LT(spec.stats.draft_seconds, spec.stats.decode_seconds);
  EXPECT_EQ(plain.stats.draft_seconds, 0.0);

  LoadOptions none;
  none.threads = 1;
  auto bare = Model::Load(kModels + "gemma4_text", none);
  ASSERT_TRUE(bare.ok());
  auto bs = bare.value()->NewSession(so);
  ASSERT_TRUE(bs.ok());
  Status r = bs.value()->Generate({TextPrompt(kGenPrompt)}, g, &spec);
  EXPECT_NE(r.message().find("drafter"), std::string::npos) << r.message();
  LoadOptions bad = none;
  bad.draft = kModels + "gemma3_text";  // not a gemma4_assistant
  auto refused = Model::Load(kModels + "gemma4_text", bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("gemma4_assistant"), std::string::npos) << refused.status().message();
}

// The CPU user's case: the main model's matrices quantized (on load here; a GGUF binds the same
// block types), its verification rows on the quantized row dots for several tokens at once, at
// both KV/attention precisions. Greedy output must still equal the same model's plain decoding.
TEST(SpeculativeApi, QuantizedMainModelGreedyEqualsPlain) {
  for (QuantizeFileType type : {QuantizeFileType::kQ4_0, QuantizeFileType::kQ8_0}) {
    LoadOptions lo;
    lo.threads = 2;
    lo.quantize = type;
    lo.draft = kModels + "gemma4_assistant_copy";
    auto m = Model::Load(kModels + "gemma4_text", lo);
    ASSERT_TRUE(m.ok()) << m.status().message();
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(std::string(QuantizeFileTypeName(type)) + (bf16 ? " bf16 KV" : " f32 KV"));
      SessionOptions so;
      so.max_context = 64;
      so.max_chunk = 16;
      so.verify_tokens = 8;
      if (bf16) so.kv_dtype = DType::kBF16, so.attention_precision = AttentionPrecision::kBf16;
      auto s = m.value()->NewSession(so);
      ASSERT_TRUE(s.ok()) << s.status().message();
      GenerateOptions g;
      g.max_new_tokens = 32;
      GenerateOutput plain;
      ASSERT_TRUE(s.value()->Generate({TextPrompt(kGenPrompt)}, g, &plain).ok());
      for (int64_t k : {1, 3, 7}) {
        SCOPED_TRACE("k=" + std::to_string(k));
        g.draft_tokens = k;
        GenerateOutput spec;
        ASSERT_TRUE(s.value()->Generate({TextPrompt(kGenPrompt)}, g, &spec).ok());
        EXPECT_EQ(spec.rows[0].tokens, plain.rows[0].tokens);
        EXPECT_GT(spec.stats.accepted_tokens, 0);
        EXPECT_LT(spec.stats.accepted_tokens, spec.stats.drafted_tokens);
      }
    }
  }
}

// The drafter quantized at load (draft_quantize): its proposals may change, the output may not.
// The copy drafter still proposes the last token often enough to be accepted; the clustered head
// (gemma4_assistant_ordered: centroids through the same rewrite) runs quantized too. A type the
// drafter does not take, or draft_quantize without a drafter, is refused by name.
TEST(SpeculativeApi, QuantizedDrafterGreedyEqualsPlain) {
  for (const char* drafter : {"gemma4_assistant_copy", "gemma4_assistant_ordered"}) {
    for (QuantizeFileType type : {QuantizeFileType::kQ8_0, QuantizeFileType::kQ4_0}) {
      SCOPED_TRACE(std::string(drafter) + " " + QuantizeFileTypeName(type));
      LoadOptions lo;
      lo.threads = 2;
      lo.draft = kModels + drafter;
      lo.draft_quantize = type;
      auto m = Model::Load(kModels + "gemma4_text", lo);
      ASSERT_TRUE(m.ok()) << m.status().message();
      SessionOptions so;
      so.max_context = 64;
      so.max_chunk = 16;
      so.verify_tokens = 5;
      auto s = m.value()->NewSession(so);
      ASSERT_TRUE(s.ok()) << s.status().message();
      GenerateOptions g;
      g.max_new_tokens = 32;
      GenerateOutput plain, spec;
      ASSERT_TRUE(s.value()->Generate({TextPrompt(kGenPrompt)}, g, &plain).ok());
      g.draft_tokens = 4;
      ASSERT_TRUE(s.value()->Generate({TextPrompt(kGenPrompt)}, g, &spec).ok());
      EXPECT_EQ(spec.rows[0].tokens, plain.rows[0].tokens);
      EXPECT_GT(spec.stats.drafted_tokens, 0);
      if (std::string(drafter) == "gemma4_assistant_copy") {
        EXPECT_GT(spec.stats.accepted_tokens, 0);
      }
    }
  }
  LoadOptions bad;
  bad.threads = 1;
  bad.draft = kModels + "gemma4_assistant_copy";
  bad.draft_quantize = QuantizeFileType::kQ4_K_M;
  auto refused = Model::Load(kModels + "gemma4_text", bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("q8_0 or q4_0"), std::string::npos) << refused.status().message();
  bad.draft.clear();
  bad.draft_quantize = QuantizeFileType::kQ8_0;
  refused = Model::Load(kModels + "gemma4_text", bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("needs a drafter"), std::string::npos) << refused.status().message();
}

TEST(DrafterConfig, ParsesAndNamesBadFields) {
  const std::string text =
      R"("text_config": {"model_type": "gemma4_text", "hidden_size": 32, "intermediate_size": 64,
         "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"],
         "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0, "vocab_size": 512})";
  auto ok = model::ParseDrafterConfig(R"({"model_type": "gemma4_assistant", "backbone_hidden_size": 64, )" + text + "}");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok.value().backbone_hidden_size, 64);
  EXPECT_EQ(ok.value().text.num_hidden_layers, 2);
  auto ordered = model::ParseDrafterConfig(R"({"model_type": "gemma4_assistant", "use_ordered_embeddings": true,
      "num_centroids": 16, "centroid_intermediate_top_k": 4, )" + text + "}");
  ASSERT_TRUE(ordered.ok()) << ordered.status().message();
  EXPECT_TRUE(ordered.value().ordered_embeddings);
  EXPECT_EQ(ordered.value().num_centroids, 16);
  EXPECT_EQ(ordered.value().centroid_top_k, 4);
  // 512 tokens in 24 clusters: not equal clusters.
  auto uneven = model::ParseDrafterConfig(R"({"model_type": "gemma4_assistant", "use_ordered_embeddings": true,
      "num_centroids": 24, )" + text + "}");
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("num_centroids"), std::string::npos) << uneven.status().message();
  auto top = model::ParseDrafterConfig(R"({"model_type": "gemma4_assistant", "use_ordered_embeddings": true,
      "num_centroids": 16, "centroid_intermediate_top_k": 17, )" + text + "}");
  ASSERT_FALSE(top.ok());
  EXPECT_NE(top.status().message().find("centroid_intermediate_top_k"), std::string::npos) << top.status().message();
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
