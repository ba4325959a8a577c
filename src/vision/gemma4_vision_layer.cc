#include "vision/gemma4_vision_layer.h"

#include <algorithm>

#include "ops/elementwise.h"
#include "tessera/attention.h"
#include "vision/gemma4_ops.h"
#include "vision/vision_ops.h"

namespace tessera::vision {

Gemma4LayerSizes Gemma4LayerSizes::For(const Gemma4VisionConfig& c, int64_t tokens) {
  const int64_t qw = c.num_attention_heads * c.head_dim, kvw = c.num_key_value_heads * c.head_dim;
  const int64_t widest_in = std::max({c.hidden_size, qw, c.intermediate_size});
  return {tokens * std::max(c.hidden_size, c.patch_size * c.patch_size * 3) + 2 * c.hidden_size, tokens * qw, tokens * kvw,
          tokens * c.intermediate_size, c.use_clipped_linears ? tokens * widest_in : 0};
}

void ClippedLinearForward(const ClippedLinear& l, const float* x, int64_t n, float* y, float* clip,
                          ops::MatmulPrecision precision, uint32_t* x_pairs, ThreadPool& pool) {
  const float* in = x;
  if (l.clip) {
    std::copy(x, x + n * l.w.in, clip);
    Clamp(clip, n * l.w.in, l.in_min, l.in_max);
    in = clip;
  }
  ops::Linear(l.w, in, n, l.w.in, y, l.w.out, &pool, precision, x_pairs);
  if (l.clip) Clamp(y, n * l.w.out, l.out_min, l.out_max);
}

namespace {

// q, k, v of every patch: projections, per-head norms (v without scale), axial rope on q and k.
void Project(const Gemma4VisionConfig& c, const Gemma4VisionLayerWeights& w, const std::vector<float>& inv_freq,
             int64_t n, ops::MatmulPrecision mp, const Gemma4LayerScratch& s, ThreadPool& pool) {
  const int64_t D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const float eps = static_cast<float>(c.rms_norm_eps);
  ClippedLinearForward(w.q_proj, s.x, n, s.q, s.clip, mp, s.x_pairs, pool);
  ClippedLinearForward(w.k_proj, s.x, n, s.k, s.clip, mp, s.x_pairs, pool);
  ClippedLinearForward(w.v_proj, s.x, n, s.v, s.clip, mp, s.x_pairs, pool);
  RmsNormRows(s.q, D, w.q_norm.data(), eps, n * Hq, D, s.q, D, pool);
  RmsNormRows(s.k, D, w.k_norm.data(), eps, n * Hkv, D, s.k, D, pool);
  RmsNormRows(s.v, D, nullptr, eps, n * Hkv, D, s.v, D, pool);
  AxialRope(s.q, n, Hq, D, s.xpos, s.ypos, inv_freq.data(), pool);
  AxialRope(s.k, n, Hkv, D, s.xpos, s.ypos, inv_freq.data(), pool);
}

}  // namespace

Status RunGemma4VisionLayer(const Gemma4VisionConfig& c, const Gemma4VisionLayerWeights& w,
                            const std::vector<float>& inv_freq, const std::vector<ImageRows>& images, int64_t tokens,
                            ops::MatmulPrecision mp, const Gemma4LayerScratch& s, float* h, ThreadPool& pool) {
  const int64_t H = c.hidden_size, D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const float eps = static_cast<float>(c.rms_norm_eps);
  RmsNormRows(h, H, w.input_ln.data(), eps, tokens, H, s.x, H, pool);
  Project(c, w, inv_freq, tokens, mp, s, pool);
  // Each image attends within itself: one call per image over its valid patches only.
  AttentionContext ctx{&pool, s.attn_arena};
  uint16_t* k16 = s.kv_bf16;
  uint16_t* v16 = k16 ? k16 + tokens * Hkv * D : nullptr;
  if (k16) {
    RoundToBf16(s.k, tokens * Hkv, D, k16, &pool);
    RoundToBf16(s.v, tokens * Hkv, D, v16, &pool);
  }
  for (const ImageRows& im : images) {
    const int32_t valid = static_cast<int32_t>(im.rows);
    AttentionParams p = ImageAttentionParams(s.q + im.row0 * Hq * D, s.k + im.row0 * Hkv * D, s.v + im.row0 * Hkv * D,
                                             s.attn + im.row0 * Hq * D, im.rows, Hq, Hkv, D, s.iota, &valid);
    if (k16) UseBf16KeysValues(p, k16 + im.row0 * Hkv * D, v16 + im.row0 * Hkv * D);
    TESSERA_RETURN_IF_ERROR(Attention(p, ctx));
  }
  ClippedLinearForward(w.o_proj, s.attn, tokens, s.x, s.clip, mp, s.x_pairs, pool);
  RmsNormRows(s.x, H, w.post_attention_ln.data(), eps, tokens, H, s.x, H, pool);
  for (int64_t i = 0; i < tokens * H; ++i) h[i] += s.x[i];

  RmsNormRows(h, H, w.pre_feedforward_ln.data(), eps, tokens, H, s.x, H, pool);
  ClippedLinearForward(w.gate_proj, s.x, tokens, s.gate, s.clip, mp, s.x_pairs, pool);
  ClippedLinearForward(w.up_proj, s.x, tokens, s.up, s.clip, mp, s.x_pairs, pool);
  ops::GeGlu(s.gate, s.up, tokens * c.intermediate_size, s.gate, &pool);
  ClippedLinearForward(w.down_proj, s.gate, tokens, s.x, s.clip, mp, s.x_pairs, pool);
  RmsNormRows(s.x, H, w.post_feedforward_ln.data(), eps, tokens, H, s.x, H, pool);
  for (int64_t i = 0; i < tokens * H; ++i) h[i] += s.x[i];
  return Status::Ok();
}

}  // namespace tessera::vision
