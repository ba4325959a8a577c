#include "tiny_model.h"

#include <cmath>
#include <random>

#include "runtime/generator.h"

namespace tessera::testing {
namespace {

struct Builder {
  std::mt19937 rng;
  model::GemmaWeights* w;
  DType dtype;

  ops::WeightView Matrix(int64_t out, int64_t in) {
    std::normal_distribution<float> nd(0.0f, 1.0f / std::sqrt(static_cast<float>(in)));
    std::vector<float> v(out * in);
    for (float& x : v) x = nd(rng);
    w->owned.emplace_back(v.size() * DTypeSize(dtype));
    EncodeFromF32(dtype, v.data(), w->owned.back().data(), v.size());
    return {w->owned.back().data(), dtype, out, in};
  }
  const float* Vector(int64_t n, float center, float spread) {
    std::uniform_real_distribution<float> ud(center - spread, center + spread);
    w->owned.emplace_back(n * 4);
    float* p = w->owned.back().as<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = ud(rng);
    return p;
  }
};

}  // namespace

std::unique_ptr<model::GemmaModel> MakeTinyModel(const TinyModelOptions& opt) {
  model::GemmaArch a;
  a.family = opt.gemma4 ? model::Family::kGemma4 : model::Family::kGemma3;
  a.model_type = opt.gemma4 ? "tiny-gemma4" : "tiny-gemma3";
  a.vocab = 97;
  a.hidden = 32;
  a.q_heads = 4;
  a.norm_offset = opt.gemma4 ? 0.0f : 1.0f;
  a.v_norm = opt.gemma4;
  a.attn_scale = opt.gemma4 ? 1.0f : 0.25f;
  a.final_softcap = opt.gemma4 ? 30.0f : 0.0f;
  a.ple_dim = opt.ple ? 8 : 0;
  a.ple_vocab = opt.ple ? 97 : 0;
  a.image_token_ids = {opt.image_token};
  a.block_token_types = {1};
  const char* kinds = "SSFSSF";
  for (int l = 0; l < 6; ++l) {
    model::LayerArch la;
    const bool full = kinds[l] == 'F';
    la.kind = full ? kv::LayerKind::kFull : kv::LayerKind::kSliding;
    la.kv_heads = full ? 1 : 2;
    la.head_dim = full ? 32 : 16;
    la.window = full ? 0 : 5;
    la.has_v_proj = !(opt.gemma4 && full);
    la.shared_kv = l >= 6 - opt.shared_layers;
    la.intermediate = 48;
    const double theta = full ? 1e6 : 1e4;
    const int64_t rotated = full && opt.gemma4 ? la.head_dim / 8 : la.head_dim / 2;  // proportional 0.25
    for (int64_t i = 0; i < la.head_dim / 2; ++i)
      la.inv_freq.push_back(i < rotated ? static_cast<float>(1.0 / std::pow(theta, 2.0 * i / la.head_dim)) : 0.0f);
    la.image_blocks = !(opt.gemma4 && full);  // Gemma 4: blocks on sliding layers only
    a.layers.push_back(la);
  }
  model::GemmaWeights w;
  Builder b{std::mt19937(opt.seed), &w, opt.weight_dtype};
  w.owned.reserve(256);  // views point into `owned`: no reallocation while building
  w.embed = b.Matrix(a.vocab, a.hidden);
  w.lm_head = w.embed;
  w.embed_scale = std::sqrt(static_cast<float>(a.hidden));
  const float center = opt.gemma4 ? 1.0f : 0.0f;
  w.final_norm = b.Vector(a.hidden, center, 0.5f);
  if (opt.ple) {
    w.ple_embed = b.Matrix(a.ple_vocab, 6 * a.ple_dim);
    w.ple_model_proj = b.Matrix(6 * a.ple_dim, a.hidden);
    w.ple_proj_norm = b.Vector(a.ple_dim, center, 0.5f);
    w.ple_embed_scale = std::sqrt(static_cast<float>(a.ple_dim));
  }
  for (const model::LayerArch& la : a.layers) {
    model::LayerWeights lw;
    const int64_t D = la.head_dim;
    lw.q_proj = b.Matrix(a.q_heads * D, a.hidden);
    lw.q_norm = b.Vector(D, center, 0.5f);
    if (!la.shared_kv) {
      lw.k_proj = b.Matrix(la.kv_heads * D, a.hidden);
      if (la.has_v_proj) lw.v_proj = b.Matrix(la.kv_heads * D, a.hidden);
      lw.k_norm = b.Vector(D, center, 0.5f);
    }
    lw.o_proj = b.Matrix(a.hidden, a.q_heads * D);
    lw.gate = b.Matrix(la.intermediate, a.hidden);
    lw.up = b.Matrix(la.intermediate, a.hidden);
    lw.down = b.Matrix(a.hidden, la.intermediate);
    lw.input_norm = b.Vector(a.hidden, center, 0.5f);
    lw.post_attn_norm = b.Vector(a.hidden, center, 0.5f);
    lw.pre_ffw_norm = b.Vector(a.hidden, center, 0.5f);
    lw.post_ffw_norm = b.Vector(a.hidden, center, 0.5f);
    lw.layer_scalar = opt.gemma4 ? *b.Vector(1, 0.8f, 0.3f) : 1.0f;
    if (opt.ple) {
      lw.ple_gate = b.Matrix(a.ple_dim, a.hidden);
      lw.ple_proj = b.Matrix(a.hidden, a.ple_dim);
      lw.ple_post_norm = b.Vector(a.hidden, center, 0.5f);
    }
    w.layers.push_back(lw);
  }
  return std::make_unique<model::GemmaModel>(std::move(a), std::move(w));
}

}  // namespace tessera::testing

namespace tessera::testing {

Prompt MakeImagePrompt(std::mt19937& rng, int64_t before, int64_t img, int64_t after, std::vector<float>& embeds,
                       int64_t hidden) {
  Prompt p;
  std::uniform_int_distribution<int32_t> tok(0, 80);
  for (int64_t i = 0; i < before; ++i) p.tokens.push_back(tok(rng)), p.token_types.push_back(0);
  for (int64_t i = 0; i < img; ++i) p.tokens.push_back(90), p.token_types.push_back(1);
  for (int64_t i = 0; i < after; ++i) p.tokens.push_back(tok(rng)), p.token_types.push_back(0);
  std::normal_distribution<float> nd;
  embeds.resize(img * hidden);
  for (float& x : embeds) x = nd(rng);
  p.image_embeds = embeds.data();
  p.image_rows = img;
  return p;
}

Status GenerateTokens(runtime::Session& s, const std::vector<Prompt>& prompts, int64_t max_new,
                      const SamplingParams& sampling, const std::vector<int32_t>& stop,
                      std::vector<std::vector<int32_t>>* out) {
  GenerateOptions o;
  o.max_new_tokens = max_new;
  o.sampling = sampling;
  o.stop_tokens = stop;
  GenerateOutput g;
  TESSERA_RETURN_IF_ERROR(runtime::Generate(s, prompts, o, &g));
  out->clear();
  for (const RowOutput& r : g.rows) out->push_back(r.tokens);
  return Status::Ok();
}

}  // namespace tessera::testing
