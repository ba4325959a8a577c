#include "model/gemma_arch.h"

#include <algorithm>
#include <cstdint>

#include "model/config.h"

namespace tessera::model {

const char* MaskRuleName(const LayerArch& la) {
  const bool window = la.kind == kv::LayerKind::kSliding;
  if (la.image_blocks) return window ? "window & (causal | image)" : "causal | image";
  return window ? "window & causal" : "causal";
}

void SetLayerMask(const LayerArch& la, bool causal, const int32_t* q_block, const int32_t* k_block, MaskSpec* m) {
  m->causal = causal;
  const bool blocks = la.image_blocks && q_block != nullptr;  // a null k_block then fails validation
  if (la.kind == kv::LayerKind::kSliding) {
    m->window_left = static_cast<int32_t>(la.window - 1);
    // HF's window bounds only keys before the query; with a block overlay, block members after
    // the query stay visible, so the right side is open (causality bounds it otherwise).
    m->window_right = la.image_blocks ? -1 : 0;
  }
  if (blocks) {
    m->q_block = q_block;
    m->k_block = k_block;
  }
}

bool GemmaArch::IsPlaceholder(int32_t token) const {
  return std::find(image_token_ids.begin(), image_token_ids.end(), token) != image_token_ids.end();
}

int32_t GemmaArch::LookupId(int32_t token) const {
  if (placeholder_as_pad && IsPlaceholder(token))
    return pad_token_id;
  return token;
}

StatusOr<GemmaArch> BuildArch(const ModelConfig& c) {
  GemmaArch a;
  const bool g4 = c.is_gemma4();
  a.family = g4 ? Family::kGemma4 : Family::kGemma3;
  a.model_type = ModelTypeName(c.model_type);
  if (c.bidirectional == BidirectionalMode::kAll)
    return Unimplemented("BuildArch: use_bidirectional_attention = \"all\" (encoder use) is not supported yet");
  a.vocab = c.vocab_size;
  a.hidden = c.hidden_size;
  a.q_heads = c.num_attention_heads;
  a.rms_eps = static_cast<float>(c.rms_norm_eps);
  a.norm_offset = g4 ? 0.0f : 1.0f;
  a.v_norm = g4;
  a.attn_scale = static_cast<float>(c.attention_scale);
  // transformers 5.24 ignores Gemma 3's attn_logit_softcapping, and Gemma3ForConditionalGeneration
  // never applies final_logit_softcapping (docs/gemma-numerics.md); match it.
  a.attn_softcap = g4 ? static_cast<float>(c.attn_logit_softcapping.value_or(0.0)) : 0.0f;
  a.final_softcap =
      c.model_type == ModelType::kGemma3 ? 0.0f : static_cast<float>(c.final_logit_softcapping.value_or(0.0));
  a.causal = true;
  a.ple_dim = c.hidden_size_per_layer_input;
  a.ple_vocab = c.has_ple() ? c.vocab_size_per_layer_input : 0;
  a.experts = c.num_experts;
  a.top_k = c.top_k_experts;
  a.expert_intermediate = c.moe_intermediate_size;
  a.pad_token_id = static_cast<int32_t>(c.pad_token_id.value_or(0));
  // Placeholder ids may lie outside the vocabulary (they are replaced, never looked up).
  for (const std::optional<int64_t>& id : {c.image_token_id, c.video_token_id, c.audio_token_id})
    if (id && *id >= 0 && *id <= INT32_MAX) a.image_token_ids.push_back(static_cast<int32_t>(*id));
  a.placeholder_as_pad = c.model_type == ModelType::kGemma4 || c.model_type == ModelType::kGemma4Unified;
  // Token types forming blocks: Gemma 3 token_type_ids 1 (image); Gemma 4 mm_token_type_ids 1
  // (image) and 2 (video); 0 text and 3 audio never do.
  a.block_token_types = g4 ? std::vector<int32_t>{1, 2} : std::vector<int32_t>{1};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerConfig& lc = c.layers[l];
    LayerArch la;
    la.kind = lc.kind;
    la.kv_heads = lc.num_kv_heads;
    la.head_dim = lc.head_dim;
    la.window = lc.kind == kv::LayerKind::kSliding ? lc.sliding_window : 0;
    la.has_v_proj = lc.has_v_proj;
    la.shared_kv = lc.is_kv_shared();
    la.intermediate = lc.intermediate_size;
    la.inv_freq = RopeInverseFrequencies(lc.rope, lc.head_dim);
    la.rope_attention_scaling = static_cast<float>(lc.rope.attention_scaling);
    // Gemma 3: blocks on every layer. Gemma 4 (unified included) with "vision": sliding layers
    // only, full layers stay causal -- the rule generation uses (docs/attention.md, "Which layers").
    const bool sliding = lc.kind == kv::LayerKind::kSliding;
    la.image_blocks = !g4 || (c.bidirectional == BidirectionalMode::kVision && sliding);
    a.layers.push_back(std::move(la));
  }
  // KV sharing must read the last earlier non-shared layer of the same kind, which is what the
  // cache's layer map does; a config that says otherwise is refused.
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerConfig& lc = c.layers[l];
    if (lc.is_kv_shared()) {
      int64_t want = -1;
      for (int64_t j = c.num_hidden_layers - c.num_kv_shared_layers - 1; j >= 0; --j)
        if (c.layers[j].kind == lc.kind) {
          want = j;
          break;
        }
      if (want != lc.kv_source_layer)
        return InvalidArgument("BuildArch: layer " + std::to_string(l) + " reads K/V of layer " +
                               std::to_string(lc.kv_source_layer) + ", expected " + std::to_string(want));
    }
  }
  return a;
}

}  // namespace tessera::model
