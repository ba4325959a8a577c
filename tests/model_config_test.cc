// ModelConfig parsing. The real-shaped configs below mirror Hub configs and transformers 5.24
// config-class defaults; their expected values were checked against the transformers classes
// (Gemma3Config / Gemma4Config / Gemma4UnifiedConfig: layer_types, per_layer_config head_dim and
// num_key_value_heads, rope_parameters, kv_sharing_modes).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "model/config.h"

namespace tessera::model {
namespace {

using Json = nlohmann::json;
using kv::LayerKind;

// google/gemma-3-1b-it config.json (text-only, written by transformers 4.50).
const char* kGemma3_1B = R"({
  "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid",
  "eos_token_id": [1, 106], "final_logit_softcapping": null, "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
  "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
  "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0,
  "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
  "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 262144
})";

// google/gemma-3-4b-it: a sparse text_config that relies on Gemma3TextConfig defaults.
const char* kGemma3_4B = R"({
  "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
  "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
  "model_type": "gemma3",
  "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                  "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                  "sliding_window": 1024},
  "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                    "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                    "patch_size": 14, "vision_use_head": false}
})";

// Gemma-4 E2B-like: PLE, KV sharing over the last 20 of 35 layers, double-wide MLP there,
// full layers every 5th with global_head_dim 512 (Hub-style keys).
Json Gemma4E2B() {
  Json lt = Json::array();
  for (int i = 0; i < 35; ++i) lt.push_back((i + 1) % 5 == 0 ? "full_attention" : "sliding_attention");
  Json text = {{"model_type", "gemma4_text"},
               {"hidden_size", 1536},
               {"intermediate_size", 6144},
               {"num_hidden_layers", 35},
               {"num_attention_heads", 8},
               {"num_key_value_heads", 1},
               {"head_dim", 256},
               {"global_head_dim", 512},
               {"hidden_size_per_layer_input", 256},
               {"vocab_size_per_layer_input", 262144},
               {"num_kv_shared_layers", 20},
               {"use_double_wide_mlp", true},
               {"sliding_window", 512},
               {"final_logit_softcapping", 30.0},
               {"layer_types", lt},
               {"vocab_size", 262144},
               {"rope_parameters",
                {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                 {"full_attention",
                  {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}}}}},
               {"eos_token_id", {1, 106}},
               {"enable_moe_block", false},
               {"attention_k_eq_v", false}};
  return Json{{"architectures", {"Gemma4ForConditionalGeneration"}},
              {"model_type", "gemma4"},
              {"text_config", text},
              {"vision_config", {{"model_type", "gemma4_vision"}}},
              {"audio_config", {{"model_type", "gemma4_audio"}}}};
}

// gemma4_unified (12B-like): 48 layers, 5:1 derived, global_head_dim 512 with one KV head and
// attention_k_eq_v on full layers.
Json Gemma4Unified() {
  Json text = {{"model_type", "gemma4_unified_text"},
               {"hidden_size", 3840},
               {"intermediate_size", 15360},
               {"num_hidden_layers", 48},
               {"num_attention_heads", 16},
               {"num_key_value_heads", 8},
               {"head_dim", 256},
               {"global_head_dim", 512},
               {"num_global_key_value_heads", 1},
               {"attention_k_eq_v", true},
               {"final_logit_softcapping", 30.0}};
  return Json{{"architectures", {"Gemma4UnifiedForConditionalGeneration"}},
              {"model_type", "gemma4_unified"},
              {"text_config", text}};
}

ModelConfig MustParse(const std::string& text) {
  StatusOr<ModelConfig> c = ParseModelConfig(text);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? c.value() : ModelConfig{};
}

TEST(ModelConfigTest, Gemma3_1B) {
  const ModelConfig c = MustParse(kGemma3_1B);
  EXPECT_EQ(c.model_type, ModelType::kGemma3Text);
  EXPECT_FALSE(c.multimodal);
  EXPECT_FALSE(c.is_gemma4());
  EXPECT_EQ(c.architectures, std::vector<std::string>{"Gemma3ForCausalLM"});
  EXPECT_EQ(c.vocab_size, 262144);
  EXPECT_EQ(c.hidden_size, 1152);
  EXPECT_EQ(c.intermediate_size, 6912);
  EXPECT_EQ(c.num_hidden_layers, 26);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.global_head_dim, 256);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  ASSERT_EQ(c.layer_types.size(), 26u);
  for (int i = 0; i < 26; ++i)
    EXPECT_EQ(c.layer_types[i], (i + 1) % 6 == 0 ? LayerKind::kFull : LayerKind::kSliding) << i;
  EXPECT_EQ(c.layer_types[25], LayerKind::kSliding);  // Gemma 3 does not force the last layer
  EXPECT_EQ(c.rope_full.type, RopeType::kDefault);
  EXPECT_EQ(c.rope_full.theta, 1e6);
  EXPECT_EQ(c.rope_sliding.theta, 1e4);
  EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / 16.0);
  EXPECT_EQ(c.query_pre_attn_scalar, 256.0);
  EXPECT_FALSE(c.attn_logit_softcapping.has_value());
  EXPECT_FALSE(c.final_logit_softcapping.has_value());
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 2);
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 106}));
  EXPECT_FALSE(c.image_token_id.has_value());
  EXPECT_EQ(c.bidirectional, BidirectionalMode::kNone);
  EXPECT_FALSE(c.has_ple());
  ASSERT_EQ(c.layers.size(), 26u);
  for (const LayerConfig& l : c.layers) {
    EXPECT_EQ(l.head_dim, 256);
    EXPECT_EQ(l.num_kv_heads, 1);
    EXPECT_EQ(l.intermediate_size, 6912);
    EXPECT_TRUE(l.has_kv_proj);
    EXPECT_TRUE(l.has_v_proj);
  }
  EXPECT_EQ(c.layers[0].sliding_window, 512);
  EXPECT_EQ(c.layers[5].sliding_window, 0);
  EXPECT_EQ(c.layers[7].kv_source_layer, 7);
}

TEST(ModelConfigTest, Gemma3_4BSparseTextConfigUsesClassDefaults) {
  const ModelConfig c = MustParse(kGemma3_4B);
  EXPECT_EQ(c.model_type, ModelType::kGemma3);
  EXPECT_TRUE(c.multimodal);
  EXPECT_EQ(c.vocab_size, 262208);  // Gemma3TextConfig default
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.sliding_window, 1024);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rope_full.type, RopeType::kLinear);
  EXPECT_EQ(c.rope_full.factor, 8.0);
  EXPECT_EQ(c.rope_full.theta, 1e6);
  EXPECT_EQ(c.rope_sliding.type, RopeType::kDefault);
  EXPECT_EQ(c.rope_sliding.theta, 1e4);
  EXPECT_EQ(c.layers[5].rope.type, RopeType::kLinear);
  EXPECT_EQ(c.layers[4].rope.type, RopeType::kDefault);
  EXPECT_EQ(c.image_token_id, 262144);
  EXPECT_EQ(c.boi_token_id, 255999);
  EXPECT_EQ(c.eoi_token_id, 256000);
  EXPECT_EQ(c.mm_tokens_per_image, 256);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 106}));  // the root value wins
  EXPECT_EQ(c.bos_token_id, 2);
  EXPECT_FALSE(c.video_token_id.has_value());
  // Linear RoPE divides every frequency by the factor.
  const std::vector<float> inv = RopeInverseFrequencies(c.rope_full, 256);
  ASSERT_EQ(inv.size(), 128u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f / 8.0f);
  EXPECT_NEAR(inv[64], std::pow(1e6, -0.5) / 8.0, 1e-9);
}

TEST(ModelConfigTest, Gemma3LegacyAndNewRopeForms) {
  // transformers >= 4.57 writes rope_parameters per layer type instead of rope_theta/rope_scaling.
  Json j = Json::parse(kGemma3_1B);
  j.erase("rope_theta");
  j.erase("rope_local_base_freq");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 5e5}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 2e4}}}};
  ModelConfig c = MustParse(j.dump());
  EXPECT_EQ(c.rope_full.type, RopeType::kLinear);
  EXPECT_EQ(c.rope_full.factor, 4.0);
  EXPECT_EQ(c.rope_full.theta, 5e5);
  EXPECT_EQ(c.rope_sliding.theta, 2e4);
  // Legacy "type" key inside rope_scaling; image_token_id alias.
  j = Json::parse(kGemma3_4B);
  j["text_config"]["rope_scaling"] = {{"type", "linear"}, {"factor", 8.0}};
  j.erase("image_token_index");
  j["image_token_id"] = 262144;
  c = MustParse(j.dump());
  EXPECT_EQ(c.rope_full.type, RopeType::kLinear);
  EXPECT_EQ(c.image_token_id, 262144);
  // Pattern without layer_types, and explicit layer_types.
  j = Json::parse(kGemma3_1B);
  j["sliding_window_pattern"] = 2;
  c = MustParse(j.dump());
  EXPECT_EQ(c.layer_types[0], LayerKind::kSliding);
  EXPECT_EQ(c.layer_types[1], LayerKind::kFull);
  j["layer_types"] = Json::array();
  for (int i = 0; i < 26; ++i) j["layer_types"].push_back(i < 3 ? "full_attention" : "sliding_attention");
  c = MustParse(j.dump());
  EXPECT_EQ(c.layer_types[2], LayerKind::kFull);
  EXPECT_EQ(c.layer_types[3], LayerKind::kSliding);
  // use_bidirectional_attention=true keeps the JSON window and reports kAll.
  j = Json::parse(kGemma3_1B);
  j["use_bidirectional_attention"] = true;
  c = MustParse(j.dump());
  EXPECT_EQ(c.bidirectional, BidirectionalMode::kAll);
  EXPECT_EQ(c.sliding_window, 512);
}

TEST(ModelConfigTest, Gemma4E2BWithPleAndKvSharing) {
  const ModelConfig c = MustParse(Gemma4E2B().dump());
  EXPECT_EQ(c.model_type, ModelType::kGemma4);
  EXPECT_TRUE(c.is_gemma4());
  EXPECT_FALSE(c.is_gemma4_unified());
  EXPECT_EQ(c.hidden_size, 1536);
  EXPECT_EQ(c.num_hidden_layers, 35);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.global_head_dim, 512);
  EXPECT_EQ(c.num_global_key_value_heads, 1);  // no override without attention_k_eq_v
  EXPECT_EQ(c.attention_scale, 1.0);
  EXPECT_FALSE(c.query_pre_attn_scalar.has_value());
  EXPECT_EQ(c.final_logit_softcapping, 30.0);
  EXPECT_TRUE(c.has_ple());
  EXPECT_EQ(c.hidden_size_per_layer_input, 256);
  EXPECT_EQ(c.vocab_size_per_layer_input, 262144);
  EXPECT_EQ(c.num_kv_shared_layers, 20);
  EXPECT_TRUE(c.use_double_wide_mlp);
  EXPECT_EQ(c.bidirectional, BidirectionalMode::kNone);  // gemma4_text default is None
  EXPECT_EQ(c.image_token_id, 258880);
  EXPECT_EQ(c.audio_token_id, 258881);
  EXPECT_EQ(c.video_token_id, 258884);
  EXPECT_EQ(c.boi_token_id, 255999);
  EXPECT_EQ(c.eoi_token_id, 258882);
  EXPECT_EQ(c.boa_token_id, 256000);
  EXPECT_EQ(c.eoa_token_id, 258883);
  EXPECT_FALSE(c.mm_tokens_per_image.has_value());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 106}));
  EXPECT_EQ(c.rope_full.type, RopeType::kProportional);
  EXPECT_EQ(c.rope_full.partial_rotary_factor, 0.25);
  // Per layer: full layers every 5th, 512 wide; layers 15.. read 13 (sliding) or 14 (full) and
  // have double-wide MLPs (transformers kv_sharing_modes: 13 and 14 "store", 15.. "reuse").
  for (int i = 0; i < 35; ++i) {
    const LayerConfig& l = c.layers[i];
    const bool full = (i + 1) % 5 == 0;
    EXPECT_EQ(l.kind, full ? LayerKind::kFull : LayerKind::kSliding) << i;
    EXPECT_EQ(l.head_dim, full ? 512 : 256) << i;
    EXPECT_EQ(l.num_kv_heads, 1) << i;
    EXPECT_TRUE(l.has_v_proj || !l.has_kv_proj) << i;
    if (i < 15) {
      EXPECT_EQ(l.kv_source_layer, i);
      EXPECT_FALSE(l.is_kv_shared());
      EXPECT_EQ(l.intermediate_size, 6144) << i;
    } else {
      EXPECT_EQ(l.kv_source_layer, full ? 14 : 13) << i;
      EXPECT_TRUE(l.is_kv_shared());
      EXPECT_FALSE(l.has_v_proj);
      EXPECT_EQ(l.intermediate_size, 12288) << i;
    }
    EXPECT_EQ(l.rope.type, full ? RopeType::kProportional : RopeType::kDefault) << i;
  }
  // Proportional RoPE over 512: 64 rotated pairs with exponent over the full 512, 192 zeros.
  const std::vector<float> inv = RopeInverseFrequencies(c.rope_full, 512);
  ASSERT_EQ(inv.size(), 256u);
  EXPECT_EQ(RopeRotaryPairs(c.rope_full, 512), 64);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[63], std::pow(1e6, -126.0 / 512.0), 1e-9);
  EXPECT_EQ(inv[64], 0.0f);
  EXPECT_EQ(inv[255], 0.0f);
}

TEST(ModelConfigTest, Gemma4PerLayerConfigFormMatchesGlobalKeys) {
  // What transformers 5.24 writes on save: per_layer_config instead of global_head_dim.
  Json j = Gemma4Unified();
  Json& t = j["text_config"];
  t.erase("global_head_dim");
  t.erase("num_global_key_value_heads");
  Json plc = Json::object();
  for (int i = 5; i < 48; i += 6)
    plc[(i < 10 ? "0" : "") + std::to_string(i)] = {{"head_dim", 512}, {"num_key_value_heads", 1}};
  t["per_layer_config"] = plc;
  const ModelConfig a = MustParse(j.dump());
  const ModelConfig b = MustParse(Gemma4Unified().dump());
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_EQ(a.layers[i].head_dim, b.layers[i].head_dim) << i;
    EXPECT_EQ(a.layers[i].num_kv_heads, b.layers[i].num_kv_heads) << i;
  }
  // per_layer_config wins over a stray global_head_dim, as in transformers; {} means no overrides.
  t["global_head_dim"] = 128;
  t["per_layer_config"] = Json::object();
  const ModelConfig c = MustParse(j.dump());
  EXPECT_EQ(c.global_head_dim, 256);
  EXPECT_EQ(c.layers[5].head_dim, 256);
  EXPECT_EQ(c.layers[5].num_kv_heads, 8);
}

TEST(ModelConfigTest, Gemma4UnifiedGlobalHeadDim512AndKEqV) {
  const ModelConfig c = MustParse(Gemma4Unified().dump());
  EXPECT_EQ(c.model_type, ModelType::kGemma4Unified);
  EXPECT_TRUE(c.is_gemma4_unified());
  EXPECT_EQ(c.vocab_size, 262144);
  EXPECT_EQ(c.sliding_window, 1024);                       // unified default
  EXPECT_EQ(c.max_position_embeddings, 262144);            // unified default
  EXPECT_EQ(c.bidirectional, BidirectionalMode::kVision);  // unified default "vision"
  EXPECT_FALSE(c.has_ple());                               // unified has no PLE
  EXPECT_TRUE(c.attention_k_eq_v);
  EXPECT_EQ(c.global_head_dim, 512);
  EXPECT_EQ(c.num_global_key_value_heads, 1);
  int full = 0;
  for (int i = 0; i < 48; ++i) {
    const LayerConfig& l = c.layers[i];
    if ((i + 1) % 6 == 0) {
      ++full;
      EXPECT_EQ(l.kind, LayerKind::kFull) << i;
      EXPECT_EQ(l.head_dim, 512);
      EXPECT_EQ(l.num_kv_heads, 1);
      EXPECT_FALSE(l.has_v_proj);
      EXPECT_TRUE(l.has_kv_proj);
      EXPECT_EQ(l.sliding_window, 0);
    } else {
      EXPECT_EQ(l.kind, LayerKind::kSliding) << i;
      EXPECT_EQ(l.head_dim, 256);
      EXPECT_EQ(l.num_kv_heads, 8);
      EXPECT_TRUE(l.has_v_proj);
      EXPECT_EQ(l.sliding_window, 1024);
    }
    EXPECT_EQ(l.intermediate_size, 15360);
  }
  EXPECT_EQ(full, 8);
  EXPECT_EQ(c.rope_full.type, RopeType::kProportional);
  EXPECT_EQ(c.rope_full.theta, 1e6);
  EXPECT_EQ(c.rope_sliding.theta, 1e4);
  // The text-only variant parses from the root.
  Json text = Gemma4Unified()["text_config"];
  const ModelConfig t = MustParse(text.dump());
  EXPECT_EQ(t.model_type, ModelType::kGemma4UnifiedText);
  EXPECT_FALSE(t.multimodal);
  EXPECT_FALSE(t.image_token_id.has_value());
}

TEST(ModelConfigTest, Gemma4MinimalUsesClassDefaults) {
  // Like Gemma4TextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=7).
  const ModelConfig c = MustParse(
      R"({"model_type": "gemma4_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 7})");
  const std::vector<LayerKind> want = {LayerKind::kSliding, LayerKind::kSliding, LayerKind::kSliding,
                                       LayerKind::kSliding, LayerKind::kSliding, LayerKind::kFull,
                                       LayerKind::kFull};  // last forced full
  EXPECT_EQ(c.layer_types, want);
  EXPECT_EQ(c.hidden_size_per_layer_input, 256);  // PLE on by default for gemma4_text
  EXPECT_EQ(c.global_head_dim, 512);              // global_head_dim default
  EXPECT_EQ(c.num_global_key_value_heads, 4);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.rope_full.type, RopeType::kProportional);
  EXPECT_EQ(c.rope_full.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});
  // Inferred from architectures when model_type is absent.
  const ModelConfig d = MustParse(
      R"({"architectures": ["Gemma4ForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "hidden_size_per_layer_input": 0})");
  EXPECT_EQ(d.model_type, ModelType::kGemma4Text);
  EXPECT_FALSE(d.has_ple());
}

// --- errors -----------------------------------------------------------------------------------

void ExpectError(const std::string& text, StatusCode code, std::vector<std::string> needles) {
  StatusOr<ModelConfig> c = ParseModelConfig(text);
  ASSERT_FALSE(c.ok()) << "accepted: " << text.substr(0, 300);
  EXPECT_EQ(c.status().code(), code) << c.status().message();
  for (const std::string& n : needles)
    EXPECT_NE(c.status().message().find(n), std::string::npos) << "'" << n << "' not in: " << c.status().message();
}

template <typename F>
std::string Edit(const char* base, F f) {
  Json j = Json::parse(base);
  f(j);
  return j.dump();
}
template <typename F>
std::string Edit(const Json& base, F f) {
  Json j = base;
  f(j);
  return j.dump();
}

TEST(ModelConfigTest, MissingRequiredFields) {
  for (const char* field : {"hidden_size", "intermediate_size", "num_hidden_layers"}) {
    ExpectError(Edit(kGemma3_1B, [&](Json& j) { j.erase(field); }), StatusCode::kInvalidArgument, {field, "required"});
    ExpectError(Edit(Gemma4E2B(), [&](Json& j) { j["text_config"].erase(field); }), StatusCode::kInvalidArgument,
                {std::string("text_config.") + field});
  }
  ExpectError(Edit(kGemma3_4B, [](Json& j) { j.erase("text_config"); }), StatusCode::kInvalidArgument, {"text_config"});
  ExpectError(Edit(kGemma3_1B,
                   [](Json& j) {
                     j.erase("model_type");
                     j.erase("architectures");
                   }),
              StatusCode::kInvalidArgument, {"model_type"});
  ExpectError(Edit(Gemma4E2B(), [](Json& j) { j["text_config"]["rope_parameters"].erase("full_attention"); }),
              StatusCode::kInvalidArgument, {"full_attention"});
  ExpectError(
      Edit(Gemma4E2B(), [](Json& j) { j["text_config"]["rope_parameters"]["sliding_attention"].erase("rope_theta"); }),
      StatusCode::kInvalidArgument, {"sliding_attention.rope_theta"});
  ExpectError(Edit(kGemma3_4B, [](Json& j) { j["text_config"]["rope_scaling"].erase("factor"); }),
              StatusCode::kInvalidArgument, {"factor"});
}

TEST(ModelConfigTest, AbsurdValues) {
  using SC = StatusCode;
  const SC bad = SC::kInvalidArgument;
  ExpectError("{", bad, {"not valid JSON"});
  ExpectError("[1, 2]", bad, {"JSON object"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["model_type"] = "gemma3n"; }), bad, {"model_type", "gemma3n"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["model_type"] = "llama"; }), bad, {"llama"});
  ExpectError(Edit(kGemma3_4B, [](Json& j) { j["text_config"]["model_type"] = "gemma4_text"; }), bad,
              {"text_config.model_type", "gemma4_text"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["vocab_size"] = -5; }), bad, {"vocab_size", "-5"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["hidden_size"] = 0; }), bad, {"hidden_size", "= 0"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["hidden_size"] = "1152"; }), bad, {"hidden_size", "integer"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["hidden_size"] = 1152.5; }), bad, {"hidden_size", "integer"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["hidden_size"] = nullptr; }), bad, {"hidden_size", "null"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["hidden_size"] = 1153; }), bad, {"hidden_size", "multiple"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["num_hidden_layers"] = 100000; }), bad, {"num_hidden_layers", "100000"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["num_attention_heads"] = 0; }), bad, {"num_attention_heads"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["num_key_value_heads"] = 3; }), bad,
              {"num_key_value_heads", "3", "divide"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["head_dim"] = 1024; }), bad, {"head_dim", "1024"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["head_dim"] = 255; }), bad, {"head_dim", "even"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["sliding_window"] = 0; }), bad, {"sliding_window", "= 0"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["sliding_window"] = nullptr; }), bad, {"sliding_window", "null"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["sliding_window_pattern"] = 0; }), bad, {"sliding_window_pattern"});
  ExpectError(Edit(kGemma3_1B,
                   [](Json& j) {
                     j["layer_types"] = {"full_attention", "sliding_attention"};
                   }),
              bad, {"layer_types", "2 entries", "26"});
  ExpectError(Edit(kGemma3_1B,
                   [](Json& j) {
                     j["layer_types"] = Json::array();
                     for (int i = 0; i < 26; ++i)
                       j["layer_types"].push_back(i == 7 ? "chunked_attention" : "full_attention");
                   }),
              bad, {"layer_types[7]", "chunked_attention"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["query_pre_attn_scalar"] = -1; }), bad, {"query_pre_attn_scalar"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["final_logit_softcapping"] = 0.0; }), bad, {"final_logit_softcapping"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["attn_logit_softcapping"] = -50.0; }), bad, {"attn_logit_softcapping"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["rms_norm_eps"] = 0; }), bad, {"rms_norm_eps"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["rope_theta"] = -10000; }), bad, {"rope_theta", "-10000"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["eos_token_id"] = {1, 300000}; }), bad, {"eos_token_id", "300000"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["bos_token_id"] = -1; }), bad, {"bos_token_id"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["use_bidirectional_attention"] = "vision"; }), bad,
              {"use_bidirectional_attention"});
  ExpectError(Edit(kGemma3_4B, [](Json& j) { j["mm_tokens_per_image"] = 0; }), bad, {"mm_tokens_per_image"});
  ExpectError(Edit(kGemma3_4B, [](Json& j) { j["image_token_id"] = 5; }), bad, {"image_token_id", "contradicts"});
  ExpectError(Edit(kGemma3_4B, [](Json& j) { j["text_config"]["rope_scaling"]["factor"] = 0; }), bad, {"factor"});
  // Gemma 4 specifics.
  ExpectError(Edit(Gemma4E2B(), [](Json& j) { j["text_config"]["global_head_dim"] = 768; }), bad,
              {"global_head_dim", "768"});
  ExpectError(Edit(Gemma4Unified(), [](Json& j) { j["text_config"]["num_global_key_value_heads"] = 3; }), bad,
              {"num_global_key_value_heads", "3"});
  ExpectError(Edit(Gemma4E2B(), [](Json& j) { j["text_config"]["num_kv_shared_layers"] = 35; }), bad,
              {"num_kv_shared_layers", "35"});
  ExpectError(Edit(Gemma4E2B(), [](Json& j) { j["text_config"]["num_kv_shared_layers"] = -1; }), bad,
              {"num_kv_shared_layers"});
  ExpectError(Edit(Gemma4E2B(), [](Json& j) { j["text_config"]["hidden_size_per_layer_input"] = -2; }), bad,
              {"hidden_size_per_layer_input"});
  ExpectError(Edit(Gemma4E2B(), [](Json& j) { j["text_config"]["vocab_size_per_layer_input"] = 0; }), bad,
              {"vocab_size_per_layer_input"});
  ExpectError(Edit(Gemma4E2B(), [](Json& j) { j["text_config"]["use_bidirectional_attention"] = "images"; }), bad,
              {"use_bidirectional_attention", "images"});
  ExpectError(
      Edit(Gemma4E2B(),
           [](Json& j) { j["text_config"]["rope_parameters"]["full_attention"]["partial_rotary_factor"] = 1.5; }),
      bad, {"partial_rotary_factor", "1.5"});
  ExpectError(
      Edit(Gemma4E2B(), [](Json& j) { j["text_config"]["rope_parameters"]["chunked_attention"] = Json::object(); }),
      bad, {"rope_parameters", "chunked_attention"});
  ExpectError(Edit(Gemma4E2B(),
                   [](Json& j) {
                     j["text_config"]["intermediate_size"] = {1, 2};
                   }),
              bad, {"intermediate_size"});
  // KV sharing where a shared layer type has no earlier producer (kv_sharing_modes raises).
  ExpectError(R"({"model_type": "gemma4_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 6,
                 "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention",
                                 "sliding_attention", "full_attention"], "num_kv_shared_layers": 2})",
              bad, {"num_kv_shared_layers", "sliding"});
  // per_layer_config: bad key, heterogeneous layers of one type.
  ExpectError(Edit(Gemma4Unified(),
                   [](Json& j) {
                     j["text_config"]["per_layer_config"] = {{"x5", {{"head_dim", 512}}}};
                   }),
              bad, {"per_layer_config", "x5"});
  ExpectError(Edit(Gemma4Unified(),
                   [](Json& j) {
                     j["text_config"]["per_layer_config"] = {{"48", {{"head_dim", 512}}}};
                   }),
              bad, {"per_layer_config", "48"});
  ExpectError(Edit(Gemma4Unified(),
                   [](Json& j) {
                     j["text_config"]["per_layer_config"] = {{"05", {{"head_dim", 512}}}};
                   }),
              bad, {"per_layer_config", "layer 11", "differ"});
  ExpectError(Edit(Gemma4Unified(),
                   [](Json& j) {
                     j["text_config"]["per_layer_config"] = {{"05", {{"head_dim", 513}}}};
                   }),
              bad, {"per_layer_config.5.head_dim", "513"});
}

// Gemma 4 MoE (26B-A4B): the three fields are read (docs/moe.md); each is required and bounded.
TEST(ModelConfigTest, MixtureOfExperts) {
  auto moe = [](Json& j) {
    j["text_config"]["enable_moe_block"] = true;
    j["text_config"]["num_experts"] = 128;
    j["text_config"]["top_k_experts"] = 8;
    j["text_config"]["moe_intermediate_size"] = 704;
  };
  StatusOr<ModelConfig> c = ParseModelConfig(Edit(Gemma4E2B(), moe));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c.value().has_moe());
  EXPECT_EQ(c.value().num_experts, 128);
  EXPECT_EQ(c.value().top_k_experts, 8);
  EXPECT_EQ(c.value().moe_intermediate_size, 704);
  StatusOr<ModelConfig> off = ParseModelConfig(Edit(Gemma4E2B(), [](Json& j) { j["text_config"]["num_experts"] = 128; }));
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off.value().has_moe());  // the fields mean nothing without enable_moe_block
  const StatusCode bad = StatusCode::kInvalidArgument;
  for (const char* field : {"num_experts", "top_k_experts", "moe_intermediate_size"})
    ExpectError(Edit(Gemma4E2B(), [&](Json& j) { moe(j), j["text_config"].erase(field); }), bad,
                {std::string("text_config.") + field, "required"});
  ExpectError(Edit(Gemma4E2B(), [&](Json& j) { moe(j), j["text_config"]["top_k_experts"] = 129; }), bad,
              {"text_config.top_k_experts", "129"});
  ExpectError(Edit(Gemma4E2B(), [&](Json& j) { moe(j), j["text_config"]["num_experts"] = 0; }), bad,
              {"text_config.num_experts", "0"});
  ExpectError(Edit(Gemma4E2B(), [&](Json& j) { moe(j), j["text_config"]["moe_intermediate_size"] = -1; }), bad,
              {"text_config.moe_intermediate_size", "-1"});
  ExpectError(Edit(Gemma4E2B(), [&](Json& j) { moe(j), j["text_config"]["num_experts"] = "8"; }), bad,
              {"text_config.num_experts"});
}

TEST(ModelConfigTest, UnsupportedFeatures) {
  const StatusCode un = StatusCode::kUnimplemented;
  ExpectError(Edit(Gemma4Unified(), [](Json& j) { j["text_config"]["enable_moe_block"] = true; }), un,
              {"enable_moe_block", "gemma4_unified"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["attention_bias"] = true; }), un, {"attention_bias"});
  ExpectError(Edit(kGemma3_1B, [](Json& j) { j["hidden_activation"] = "silu"; }), un, {"hidden_activation", "silu"});
  ExpectError(Edit(kGemma3_1B,
                   [](Json& j) {
                     j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
                   }),
              un, {"rope_type", "yarn"});
  ExpectError(Edit(Gemma4Unified(),
                   [](Json& j) {
                     j["text_config"]["per_layer_config"] = {{"05", {{"intermediate_size", 1}}}};
                   }),
              un, {"intermediate_size"});
}

TEST(ModelConfigTest, LoadFromFileAndDirectory) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "tessera_model_config_test";
  fs::create_directories(dir);
  {
    std::ofstream out(dir / "config.json", std::ios::binary | std::ios::trunc);
    out << kGemma3_1B;
  }
  EXPECT_TRUE(LoadModelConfig(dir.string()).ok());
  EXPECT_TRUE(LoadModelConfig((dir / "config.json").string()).ok());
  StatusOr<ModelConfig> missing = LoadModelConfig((dir / "nope.json").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.json"), std::string::npos);
  {
    std::ofstream out(dir / "config.json", std::ios::binary | std::ios::trunc);
    out << "{\"model_type\": \"gemma3_text\"}";
  }
  StatusOr<ModelConfig> bad = LoadModelConfig(dir.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("config.json"), std::string::npos);
  EXPECT_NE(bad.status().message().find("hidden_size"), std::string::npos);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// Random structural and byte-level damage: every outcome is a Status, never a crash or throw.
TEST(ModelConfigTest, FuzzNeverCrashes) {
  std::mt19937_64 rng(77);
  const std::vector<Json> bases = {Json::parse(kGemma3_1B), Json::parse(kGemma3_4B), Gemma4E2B(), Gemma4Unified()};
  const std::vector<Json> values = {nullptr,
                                    -1,
                                    0,
                                    1,
                                    3,
                                    513,
                                    int64_t{1} << 40,
                                    1.5,
                                    -0.0,
                                    1e308,
                                    "x",
                                    "full_attention",
                                    true,
                                    Json::array(),
                                    Json::array({1, "a"}),
                                    Json::object(),
                                    Json{{"rope_type", "proportional"}}};
  int ok = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Json j = bases[rng() % bases.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      Json* target = (j.contains("text_config") && rng() % 2) ? &j["text_config"] : &j;
      if (!target->is_object() || target->empty()) break;
      auto it = target->begin();
      std::advance(it, static_cast<long>(rng() % target->size()));
      const std::string key = it.key();
      if (rng() % 4 == 0)
        target->erase(key);
      else
        (*target)[key] = values[rng() % values.size()];
    }
    std::string text = j.dump();
    if (rng() % 3 == 0 && !text.empty()) {  // byte damage on top
      for (int k = 0; k < 3; ++k) text[rng() % text.size()] = static_cast<char>(rng() % 128);
    }
    StatusOr<ModelConfig> c = ParseModelConfig(text);
    if (c.ok()) {
      ++ok;
      ASSERT_EQ(static_cast<int64_t>(c.value().layers.size()), c.value().num_hidden_layers);
      for (const LayerConfig& l : c.value().layers) {
        ASSERT_GE(l.head_dim, 2);
        ASSERT_LE(l.head_dim, 512);
        ASSERT_EQ(c.value().num_attention_heads % l.num_kv_heads, 0);
      }
    } else {
      ASSERT_FALSE(c.status().message().empty());
    }
  }
  EXPECT_GT(ok, 0);
}

}  // namespace
}  // namespace tessera::model
