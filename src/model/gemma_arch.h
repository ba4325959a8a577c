// The resolved architecture of a Gemma 3 / Gemma 4 text decoder: everything the forward pass
// needs per layer, derived once from the typed config (src/model/config.h), so the forward pass
// makes no decisions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/attention.h"
#include "tessera/kv/layer_map.h"
#include "tessera/status.h"

namespace tessera::model {

enum class Family { kGemma3, kGemma4 };

struct LayerArch {
  kv::LayerKind kind = kv::LayerKind::kFull;
  int64_t kv_heads = 1, head_dim = 1;  // K, V and Q share head_dim
  int64_t window = 0;                  // HF sliding_window W (sliding layers), 0 for full layers
  bool has_v_proj = true;              // false: V is the raw k_proj output (attention_k_eq_v)
  bool shared_kv = false;              // reads another layer's K/V (num_kv_shared_layers)
  int64_t intermediate = 1;            // MLP width of this layer
  std::vector<float> inv_freq;         // [head_dim / 2] RoPE inverse frequencies (zeros: no rotation)
  float rope_attention_scaling = 1.0f;
  // Image blocks enter the mask as window AND (causal OR same block); false: window AND causal.
  // Which layers get them is the per-variant table of docs/attention.md.
  bool image_blocks = false;
};

struct GemmaArch {
  Family family = Family::kGemma3;
  std::string model_type;
  int64_t vocab = 0, hidden = 0, q_heads = 0;
  float rms_eps = 1e-6f;
  float norm_offset = 1.0f;         // Gemma 3 norms scale by (1 + w); Gemma 4 by w
  bool v_norm = false;              // Gemma 4: weightless RMSNorm on V
  float attn_scale = 1.0f;          // Gemma 3: query_pre_attn_scalar^-1/2; Gemma 4: 1
  float attn_softcap = 0.0f;        // 0 = off
  float final_softcap = 0.0f;       // 0 = off
  bool causal = true;               // false for use_bidirectional_attention == "all"
  int64_t ple_dim = 0, ple_vocab = 0;  // Gemma 4 per-layer embeddings (0 = none)
  int32_t pad_token_id = 0;            // PLE token identity of soft (image/audio) tokens
  // Gemma 4 mixture of experts on every layer (docs/moe.md); experts == 0: none.
  int64_t experts = 0, top_k = 0, expert_intermediate = 0;
  std::vector<int32_t> image_token_ids;  // placeholder ids replaced by image embeddings
  // Gemma 4 multimodal (gemma4, gemma4_unified): transformers embeds every image/video/audio
  // placeholder id under the pad id (main embedding and PLE identity), so a placeholder without an
  // embedding -- one the model generated -- is looked up as pad. false: looked up as itself.
  bool placeholder_as_pad = false;
  std::vector<int32_t> block_token_types;  // token types that form image blocks
  std::vector<LayerArch> layers;

  int64_t num_layers() const { return static_cast<int64_t>(layers.size()); }
  // The row a token without an embedding is looked up under (see placeholder_as_pad).
  int32_t LookupId(int32_t token) const;
  // Whether `token` is an image placeholder id (it takes a soft-token row when one is given).
  bool IsPlaceholder(int32_t token) const;
  int64_t max_head_dim() const;
  int64_t max_intermediate() const;
  // The first of the trailing KV-shared layers (num_layers() without any): from there on no layer
  // writes K/V, so a token's later layers feed only that token's own output.
  int64_t kv_writers_end() const;
};

// The layer's mask composition in words, e.g. "window & (causal | image)".
const char* MaskRuleName(const LayerArch& layer);

// Fills the structural part of a layer's mask: causal, the window of a sliding layer and, when
// the layer takes image blocks and block ids are given, the blocks. Positions, validity and the
// dense mask stay the caller's.
void SetLayerMask(const LayerArch& layer, bool causal, const int32_t* q_block, const int32_t* k_block,
                  MaskSpec* mask);

struct ModelConfig;
// Resolves a parsed config into the per-layer architecture (mask rules, RoPE tables, geometry).
StatusOr<GemmaArch> BuildArch(const ModelConfig& config);

}  // namespace tessera::model
