// libFuzzer target: config.json (model::ParseModelConfig, what LoadModelConfig runs on the text).
// Invariants on success: the per-layer table is complete and within the documented limits (every
// size positive, heads divisible, KV-shared layers read an earlier owner of the same kind), the
// layer kinds build a KV layer map, and every layer's RoPE frequencies are finite.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "model/config.h"
#include "model/rope_config.h"
#include "tessera/kv/layer_map.h"

namespace {

using tessera::model::LayerConfig;
using tessera::model::ModelConfig;

void CheckLayers(const ModelConfig& c) {
  const int64_t L = c.num_hidden_layers;
  FUZZ_CHECK(L >= 1 && static_cast<int64_t>(c.layers.size()) == L, "layers.size() != num_hidden_layers");
  FUZZ_CHECK(static_cast<int64_t>(c.layer_types.size()) == L, "layer_types.size() != num_hidden_layers");
  for (int64_t i = 0; i < L; ++i) {
    const LayerConfig& l = c.layers[i];
    FUZZ_CHECK(l.kind == c.layer_types[i], "layer kind differs from layer_types");
    FUZZ_CHECK(l.head_dim >= 2 && l.head_dim <= 512 && l.head_dim % 2 == 0, "head_dim");
    FUZZ_CHECK(l.num_kv_heads >= 1 && c.num_attention_heads % l.num_kv_heads == 0, "heads not divisible");
    FUZZ_CHECK(l.intermediate_size >= 1, "intermediate_size");
    FUZZ_CHECK((l.kind == tessera::kv::LayerKind::kSliding) == (l.sliding_window > 0), "window iff sliding");
    FUZZ_CHECK(l.kv_source_layer >= 0 && l.kv_source_layer <= i, "kv_source_layer out of range");
    const LayerConfig& src = c.layers[l.kv_source_layer];
    FUZZ_CHECK(src.has_kv_proj && src.kind == l.kind, "KV source is not an owner of the same kind");
    FUZZ_CHECK(l.is_kv_shared() == (l.kv_source_layer != i), "shared iff reading another layer");
    FUZZ_CHECK(l.rope.theta > 1.0 && std::isfinite(l.rope.theta), "rope theta");
    for (float f : tessera::model::RopeInverseFrequencies(l.rope, l.head_dim))
      FUZZ_CHECK(std::isfinite(f) && f >= 0.0f, "non-finite RoPE frequency");
  }
  FUZZ_CHECK(tessera::kv::LayerMap::Build(c.layer_types, c.num_kv_shared_layers).ok(),
             "an accepted config's layer kinds do not build a KV layer map");
}

void Check(std::string_view text) {
  tessera::StatusOr<ModelConfig> r = tessera::model::ParseModelConfig(text);
  if (!r.ok()) {
    FUZZ_CHECK(!r.status().message().empty(), "an error must say what is wrong");
    return;
  }
  const ModelConfig& c = r.value();
  FUZZ_CHECK(c.hidden_size >= 1 && c.vocab_size >= 1 && c.num_attention_heads >= 1, "sizes");
  FUZZ_CHECK(c.num_kv_shared_layers >= 0 && c.num_kv_shared_layers < c.num_hidden_layers, "num_kv_shared_layers");
  FUZZ_CHECK(std::isfinite(c.attention_scale) && c.attention_scale > 0, "attention scale");
  FUZZ_CHECK(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps >= 0, "rms_norm_eps");
  for (int64_t id : c.eos_token_ids) FUZZ_CHECK(id >= 0, "negative eos id");
  if (c.has_moe())
    FUZZ_CHECK(c.is_gemma4() && !c.is_gemma4_unified() && c.top_k_experts >= 1 &&
                   c.top_k_experts <= c.num_experts && c.moe_intermediate_size >= 1,
               "MoE sizes");
  else
    FUZZ_CHECK(c.top_k_experts == 0 && c.moe_intermediate_size == 0, "MoE sizes without MoE");
  CheckLayers(c);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  tessera::fuzz::NoEscape("ParseModelConfig", [&] { Check(text); });
  return 0;
}
