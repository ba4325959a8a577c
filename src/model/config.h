// ModelConfig: the typed, validated form of a Hugging Face config.json for the Gemma 3 / Gemma 4
// text decoders (transformers 5.24: models/gemma3/configuration_gemma3.py,
// models/gemma4/configuration_gemma4.py, models/gemma4_unified/configuration_gemma4_unified.py).
//
// Supported model_type values (root "model_type", else inferred from "architectures"[0]):
//   gemma3_text                 Gemma3ForCausalLM                         text fields at the root
//   gemma3                      Gemma3ForConditionalGeneration            text fields in "text_config"
//   gemma4_text                 Gemma4ForCausalLM                         root
//   gemma4                      Gemma4ForConditionalGeneration            "text_config"
//   gemma4_unified_text         Gemma4UnifiedForCausalLM                  root
//   gemma4_unified              Gemma4UnifiedForConditionalGeneration     "text_config"
// Anything else (gemma2, gemma3n, ...) is refused with kInvalidArgument naming the value.
//
// Defaults. Hub configs are sparse (google/gemma-3-4b-it's text_config lists only a few fields),
// so a missing field takes the default of the transformers config class of that model_type,
// exactly as transformers would; each field below names it. Only the fields that fix the size of
// every weight have no default here: hidden_size, intermediate_size, num_hidden_layers. A field
// present with the wrong JSON type, null where HF does not allow None, or an absurd value
// (negative, zero, heads not dividing, head_dim > 512, window < 1, layer_types of the wrong
// length or with an unknown type, ...) is kInvalidArgument naming the field and the value.
// Features the engine does not implement (MoE on gemma4_unified, attention biases, RoPE types other than
// default/linear/proportional, activations other than tanh GELU) are kUnimplemented.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/rope_config.h"
#include "tessera/kv/layer_map.h"
#include "tessera/status.h"

namespace tessera::model {

enum class ModelType { kGemma3Text, kGemma3, kGemma4Text, kGemma4, kGemma4UnifiedText, kGemma4Unified };
const char* ModelTypeName(ModelType t);

// use_bidirectional_attention. Gemma 3: bool (true -> kAll). Gemma 4: null | "vision" | "all".
enum class BidirectionalMode {
  kNone,    // causal; image blocks per the family rule (Gemma 3 always overlays image blocks)
  kVision,  // Gemma 4 "vision": image/video soft tokens of one item see each other
  kAll,     // every token sees every token (encoder use). HF then runs sliding layers with the
            // symmetric window sliding_window // 2 + 1 (configuration_gemma4.py:184-186,
            // configuration_gemma3.py:101-102); `sliding_window` below stays the JSON value.
};
const char* BidirectionalModeName(BidirectionalMode m);

enum class HiddenActivation { kGeluTanh };  // "gelu_pytorch_tanh" (or its alias "gelu_new")

// Everything one decoder layer needs, resolved from the global fields (see ModelConfig::layers).
struct LayerConfig {
  kv::LayerKind kind = kv::LayerKind::kFull;  // layer_types[i]
  int64_t head_dim = 0;           // Q, K and V head width: head_dim, or global_head_dim on Gemma 4 full layers
  int64_t num_kv_heads = 0;       // num_key_value_heads, or num_global_key_value_heads (see below)
  int64_t sliding_window = 0;     // HF W (key visible iff q_pos - k_pos < W) on sliding layers; 0 on full
  int64_t intermediate_size = 0;  // MLP width: intermediate_size, x2 on KV-shared layers with use_double_wide_mlp
  bool has_kv_proj = true;        // false on KV-shared layers (no k_proj/v_proj/k_norm in the checkpoint)
  bool has_v_proj = true;         // false on Gemma 4 full layers with attention_k_eq_v (V = raw k_proj output)
  int64_t kv_source_layer = 0;    // the layer whose K/V this one reads: itself, or the last earlier
                                  // non-shared layer of the same kind (Gemma 4 num_kv_shared_layers)
  RopeConfig rope;                // the rope parameters of this layer's kind

  bool is_kv_shared() const { return !has_kv_proj; }
};

struct ModelConfig {
  // --- identity -------------------------------------------------------------------------------
  ModelType model_type = ModelType::kGemma3Text;  // root "model_type"
  std::vector<std::string> architectures;         // root "architectures" (may be empty)
  bool multimodal = false;                        // text fields came from "text_config"

  // --- sizes (text config) ----------------------------------------------------------------------
  int64_t vocab_size = 0;           // vocab_size; default 262208 (Gemma 3), 262144 (Gemma 4)
  int64_t hidden_size = 0;          // hidden_size; required
  int64_t intermediate_size = 0;    // intermediate_size; required (per-layer width: layers[i])
  int64_t num_hidden_layers = 0;    // num_hidden_layers; required
  int64_t num_attention_heads = 0;  // num_attention_heads; default 8
  int64_t num_key_value_heads = 0;  // num_key_value_heads; default 4 (sliding layers, and all Gemma 3 layers)
  int64_t head_dim = 0;             // head_dim; default 256 (sliding layers, and all Gemma 3 layers)
  // Gemma 4 full layers. From per_layer_config (what transformers 5.24 writes: {"05": {"head_dim":
  // 512, "num_key_value_heads": 1}, ...}) when present, else from the keys "global_head_dim"
  // (default 512) and "num_global_key_value_heads" (default None; applied only with
  // attention_k_eq_v) (configuration_gemma4.py:208-221). Gemma 3: equal to head_dim / num_key_value_heads.
  int64_t global_head_dim = 0;
  int64_t num_global_key_value_heads = 0;
  bool attention_k_eq_v = false;  // Gemma 4 attention_k_eq_v; default false

  // --- attention layout ---------------------------------------------------------------------------
  // layer_types, or derived: Gemma 3 sliding iff (i + 1) % sliding_window_pattern != 0 (pattern
  // default 6, configuration_gemma3.py:105-111); Gemma 4 the same with pattern 6, and the last
  // layer is forced to full even when layer_types is given (configuration_gemma4.py:188-199).
  std::vector<kv::LayerKind> layer_types;  // [num_hidden_layers]
  // sliding_window as written in config.json; default 4096 (gemma3), 512 (gemma4), 1024
  // (gemma4_unified). 0 only when no layer slides (Gemma 3 allows null then).
  int64_t sliding_window = 0;
  RopeConfig rope_sliding;  // rope_parameters["sliding_attention"]
  RopeConfig rope_full;     // rope_parameters["full_attention"]
  // Gemma 3: query_pre_attn_scalar (default 256); scores scale = query_pre_attn_scalar^-1/2.
  // Gemma 4 has no such field: scale 1 (q_norm/k_norm carry the scale).
  std::optional<double> query_pre_attn_scalar;
  double attention_scale = 1.0;
  std::optional<double> attn_logit_softcapping;                // Gemma 3 attn_logit_softcapping; default None
  std::optional<double> final_logit_softcapping;               // final_logit_softcapping; default None
  BidirectionalMode bidirectional = BidirectionalMode::kNone;  // gemma4_unified default "vision"
  // Gemma 4 num_kv_shared_layers (default 0): the last n layers read earlier layers' K/V.
  int64_t num_kv_shared_layers = 0;
  bool use_double_wide_mlp = false;  // Gemma 4 use_double_wide_mlp; default false

  // --- mixture of experts (Gemma 4 enable_moe_block: every layer; docs/moe.md) ----------------
  int64_t num_experts = 0;            // num_experts; 0 = no MoE block (enable_moe_block false)
  int64_t top_k_experts = 0;          // top_k_experts, in [1, num_experts]
  int64_t moe_intermediate_size = 0;  // moe_intermediate_size: each expert's MLP width

  // --- per-layer embeddings (Gemma 4 PLE; not in gemma4_unified) ---------------------------------
  int64_t hidden_size_per_layer_input = 0;  // default 256 for gemma4_text (0 = no PLE)
  int64_t vocab_size_per_layer_input = 0;   // default 262144; 0 when PLE is off

  // --- misc -----------------------------------------------------------------------------------
  double rms_norm_eps = 1e-6;                                        // rms_norm_eps
  HiddenActivation hidden_activation = HiddenActivation::kGeluTanh;  // default "gelu_pytorch_tanh"
  // tie_word_embeddings: root value for multimodal configs, else the text value; default true.
  // An "lm_head.weight" in the checkpoint still wins (docs/gemma-numerics.md).
  bool tie_word_embeddings = true;
  int64_t max_position_embeddings = 0;  // default 131072 (gemma3, gemma4), 262144 (gemma4_unified)

  // --- token ids (root value wins for multimodal configs, then text_config, then the default) --
  std::optional<int64_t> bos_token_id;  // default 2
  std::vector<int64_t> eos_token_ids;   // eos_token_id: int or list; default [1]
  std::optional<int64_t> pad_token_id;  // default 0 (null -> none)
  // Multimodal wrappers only (absent for text-only model types):
  std::optional<int64_t> image_token_id;       // gemma3: image_token_index|image_token_id (262144); gemma4: 258880
  std::optional<int64_t> boi_token_id;         // gemma3: boi_token_index (255999); gemma4: boi_token_id (255999)
  std::optional<int64_t> eoi_token_id;         // gemma3: eoi_token_index (256000); gemma4: eoi_token_id (258882)
  std::optional<int64_t> mm_tokens_per_image;  // gemma3 only (256)
  std::optional<int64_t> video_token_id;       // gemma4: 258884
  std::optional<int64_t> audio_token_id;       // gemma4: 258881
  std::optional<int64_t> boa_token_id;         // gemma4: 256000
  std::optional<int64_t> eoa_token_id;         // gemma4: eoa_token_index (258883)

  // --- resolved per layer -----------------------------------------------------------------------
  std::vector<LayerConfig> layers;  // [num_hidden_layers]

  bool is_gemma4() const { return model_type != ModelType::kGemma3Text && model_type != ModelType::kGemma3; }
  bool is_gemma4_unified() const {
    return model_type == ModelType::kGemma4Unified || model_type == ModelType::kGemma4UnifiedText;
  }
  bool has_ple() const { return hidden_size_per_layer_input > 0; }
  bool has_moe() const { return num_experts > 0; }
  const RopeConfig& rope(kv::LayerKind kind) const {
    return kind == kv::LayerKind::kSliding ? rope_sliding : rope_full;
  }
};

// Parses and validates config.json text. Never throws.
StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text);
// Reads `path` (a config.json, or a directory containing one) and parses it.
StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

}  // namespace tessera::model
