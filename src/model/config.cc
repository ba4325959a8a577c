#include "model/config.h"

#include <sys/stat.h>

#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "io/input_file.h"
#include "io/json_nesting.h"
#include "model/config_fields.h"

namespace tessera::model {
namespace {

using config_detail::Bad;
using config_detail::CheckRange;
using config_detail::Fields;
using config_detail::Json;
using config_detail::Show;
using config_detail::Str;

// Sanity bounds: far above any real Gemma, far below anything that overflows size arithmetic.
constexpr int64_t kMaxVocab = int64_t{1} << 26;
constexpr int64_t kMaxHidden = int64_t{1} << 16;
constexpr int64_t kMaxIntermediate = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 512;
constexpr int64_t kMaxPositions = (int64_t{1} << 31) - 1;
constexpr uint64_t kMaxConfigBytes = 16ull << 20;

struct TypeInfo {
  const char* name;
  ModelType type;
  const char* architecture;
  bool multimodal;
  const char* text_model_type;  // expected text_config.model_type
};
constexpr TypeInfo kTypes[] = {
    {"gemma3_text", ModelType::kGemma3Text, "Gemma3ForCausalLM", false, "gemma3_text"},
    {"gemma3", ModelType::kGemma3, "Gemma3ForConditionalGeneration", true, "gemma3_text"},
    {"gemma4_text", ModelType::kGemma4Text, "Gemma4ForCausalLM", false, "gemma4_text"},
    {"gemma4", ModelType::kGemma4, "Gemma4ForConditionalGeneration", true, "gemma4_text"},
    {"gemma4_unified_text", ModelType::kGemma4UnifiedText, "Gemma4UnifiedForCausalLM", false, "gemma4_unified_text"},
    {"gemma4_unified", ModelType::kGemma4Unified, "Gemma4UnifiedForConditionalGeneration", true, "gemma4_unified_text"},
};

std::string SupportedTypes() {
  std::string s;
  for (const TypeInfo& t : kTypes) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

// One layer type name -> kind. "attention" is transformers' legacy spelling of "full_attention"
// (configuration_utils.py:94-99).
bool ParseLayerType(std::string_view s, kv::LayerKind* out) {
  if (s == "sliding_attention") {
    *out = kv::LayerKind::kSliding;
    return true;
  }
  if (s == "full_attention" || s == "attention") {
    *out = kv::LayerKind::kFull;
    return true;
  }
  return false;
}

const char* LayerTypeKey(kv::LayerKind k) {
  return k == kv::LayerKind::kSliding ? "sliding_attention" : "full_attention";
}

// Resolves one layer type's rope entry. `entry` may be null (absent); `theta_fallback` is what
// transformers' setdefault supplies when the entry has no rope_theta (none -> required).
StatusOr<RopeConfig> ParseRope(const Json* entry, const std::string& field, const Json* scaling,
                               std::optional<double> theta_fallback, std::optional<double> prf_fallback) {
  Json merged = Json::object();
  if (entry != nullptr && !entry->is_null()) {
    if (!entry->is_object()) return Bad(field, "= " + Show(*entry) + " must be an object");
    merged = *entry;
  }
  // Gemma 3's legacy rope_scaling is merged into the full-attention entry
  // (configuration_gemma3.py:142-143).
  if (scaling != nullptr && !scaling->is_null()) {
    if (!scaling->is_object()) return Bad(field, "rope_scaling = " + Show(*scaling) + " must be an object");
    merged.update(*scaling);
  }
  Fields f(merged, field + ".");
  RopeConfig rope;
  std::optional<std::string> type;
  CFG_ASSIGN(type, f.OptString("rope_type", std::nullopt));
  if (!type) {
    CFG_ASSIGN(type, f.OptString("type", std::string("default")));  // legacy key
  }
  if (!type) type = "default";
  if (*type == "default")
    rope.type = RopeType::kDefault;
  else if (*type == "linear")
    rope.type = RopeType::kLinear;
  else if (*type == "proportional")
    rope.type = RopeType::kProportional;
  else
    return Unimplemented("ParseModelConfig: " + field + ".rope_type = \"" + *type +
                         "\" is not supported (default, linear, proportional)");

  std::optional<double> theta;
  CFG_ASSIGN(theta, f.OptNum("rope_theta", theta_fallback));
  if (!theta) return Bad(field + ".rope_theta", "is a required field and is missing");
  if (!(*theta > 1.0) || !std::isfinite(*theta)) return Bad(field + ".rope_theta", "= " + Str(*theta) + " must be > 1");
  rope.theta = *theta;

  if (rope.type == RopeType::kLinear && !f.HasValue("factor"))
    return Bad(field + ".factor", "is required for rope_type \"linear\" and is missing");
  CFG_ASSIGN(rope.factor, f.Num("factor", 1.0));
  // The frequencies are divided by the factor in float32: below the smallest normal float it would
  // make them infinite, above the largest it would make them all zero.
  if (!(rope.factor >= std::numeric_limits<float>::min() && rope.factor <= std::numeric_limits<float>::max()))
    return Bad(field + ".factor", "= " + Str(rope.factor) + " must be > 0 and a normal float32 value");

  std::optional<double> prf;
  CFG_ASSIGN(prf, f.OptNum("partial_rotary_factor", prf_fallback));
  const double p = prf.value_or(1.0);
  if (!(p > 0.0 && p <= 1.0)) return Bad(field + ".partial_rotary_factor", "= " + Str(p) + " must be in (0, 1]");
  if (rope.type == RopeType::kProportional) {
    rope.partial_rotary_factor = p;
  } else if (rope.type == RopeType::kLinear && p != 1.0) {
    // HF's linear rope would shrink the rotated width to int(D * p) with its own exponent base.
    return Unimplemented("ParseModelConfig: " + field + ".partial_rotary_factor = " + Str(p) +
                         " with rope_type \"linear\" is not supported");
  }
  // "default": the Gemma rotary classes ignore partial_rotary_factor (modeling_gemma3.py:162-185,
  // modeling_gemma4.py:1105-1125), so it stays 1.
  return rope;
}

// Per-layer attention overrides of Gemma 4 full layers (head_dim, num_key_value_heads).
struct LayerOverride {
  std::optional<int64_t> head_dim, num_kv_heads;
};

StatusOr<std::map<int64_t, LayerOverride>> ParsePerLayerConfig(const Json& plc, const std::string& field,
                                                               int64_t num_layers) {
  if (!plc.is_object()) return Bad(field, "= " + Show(plc) + " must be an object");
  std::map<int64_t, LayerOverride> out;
  for (auto it = plc.begin(); it != plc.end(); ++it) {
    const std::string& key = it.key();
    int64_t idx = -1;
    bool digits = !key.empty() && key.size() <= 9;
    for (char c : key) digits = digits && c >= '0' && c <= '9';
    if (digits) idx = std::stoll(key);
    if (!digits || idx >= num_layers)
      return Bad(field,
                 "key \"" + key.substr(0, 40) + "\" is not a layer index in [0, " + std::to_string(num_layers) + ")");
    const std::string lf = field + "." + key;
    if (!it.value().is_object()) return Bad(lf, "= " + Show(it.value()) + " must be an object");
    Fields f(it.value(), lf + ".");
    LayerOverride o;
    for (auto a = it.value().begin(); a != it.value().end(); ++a) {
      if (a.key() == "head_dim") {
        CFG_ASSIGN(o.head_dim, f.OptInt("head_dim", std::nullopt, false));
        if (!o.head_dim) return Bad(lf + ".head_dim", "must not be null");
      } else if (a.key() == "num_key_value_heads") {
        CFG_ASSIGN(o.num_kv_heads, f.OptInt("num_key_value_heads", std::nullopt, false));
        if (!o.num_kv_heads) return Bad(lf + ".num_key_value_heads", "must not be null");
      } else {
        return Unimplemented("ParseModelConfig: " + lf + "." + a.key().substr(0, 60) +
                             ": per-layer overrides other than head_dim / num_key_value_heads are not supported");
      }
    }
    out[idx] = o;
  }
  return out;
}

StatusOr<std::optional<int64_t>> TokenId(const Fields& primary, const Fields* secondary, std::string_view key,
                                         std::optional<int64_t> def) {
  if (primary.Present(key)) return primary.OptInt(key, def, false);
  if (secondary != nullptr && secondary->Present(key)) return secondary->OptInt(key, def, false);
  return def;
}

// --- the sections of Parse, in the order it runs them (a config with several errors reports the
// first in this order) ---

// What every section after the model type reads: the family and where its fields live.
struct ParseContext {
  const TypeInfo& info;
  const Fields& R;  // the root object
  const Fields& T;  // the text fields: the root, or text_config for the multimodal types
  bool g4;          // a Gemma 4 type (gemma4*, gemma4_unified*)
  bool unified;     // a gemma4_unified type
};

// Per-layer attention widths and the field each came from (for messages); first_of_kind is filled
// by CheckAttentionWidths with the first layer of each kind.
struct LayerWidths {
  std::vector<int64_t> head_dims, kv_heads;
  std::vector<std::string> hd_src, kv_src;
  std::map<kv::LayerKind, int64_t> first_of_kind;
};

// "architectures" and "model_type" (or the type inferred from architectures[0]).
StatusOr<const TypeInfo*> ResolveModelType(const Fields& R, ModelConfig* c) {
  if (R.Present("architectures")) {
    const Json& a = *R.Find("architectures");
    if (!a.is_array() && !a.is_null()) return Bad("architectures", "= " + Show(a) + " must be a list of strings");
    if (a.is_array())
      for (const Json& s : a) {
        if (!s.is_string()) return Bad("architectures", "entry " + Show(s) + " must be a string");
        c->architectures.push_back(s.get<std::string>());
      }
  }
  std::optional<std::string> type_name;
  CFG_ASSIGN(type_name, R.OptString("model_type", std::nullopt));
  const TypeInfo* info = nullptr;
  for (const TypeInfo& t : kTypes) {
    if (type_name ? *type_name == t.name : (!c->architectures.empty() && c->architectures[0] == t.architecture))
      info = &t;
  }
  if (info == nullptr) {
    if (type_name)
      return Bad("model_type", "= \"" + type_name->substr(0, 80) + "\" is not supported (" + SupportedTypes() + ")");
    if (!c->architectures.empty())
      return Bad("architectures[0]", "= \"" + c->architectures[0].substr(0, 80) +
                                         "\" is not a supported architecture and model_type is missing");
    return Bad("model_type", "is a required field and is missing (and no architectures to infer it from)");
  }
  c->model_type = info->type;
  c->multimodal = info->multimodal;
  return info;
}

// The object holding the text fields: the root, or text_config (whose model_type, if given, must
// match the wrapper's).
StatusOr<const Json*> TextConfig(const Json& root, const Fields& R, const TypeInfo& info) {
  if (!info.multimodal) return &root;
  const Json* tc = R.Find("text_config");
  if (tc == nullptr || tc->is_null())
    return Bad("text_config", "is a required field for model_type \"" + std::string(info.name) + "\" and is missing");
  if (!tc->is_object()) return Bad("text_config", "= " + Show(*tc) + " must be an object");
  const Fields T(*tc, "text_config.");
  std::optional<std::string> tt;
  CFG_ASSIGN(tt, T.OptString("model_type", std::nullopt));
  if (tt && *tt != info.text_model_type)
    return Bad(T.Name("model_type"), "= \"" + tt->substr(0, 80) + "\" does not match model_type \"" + info.name +
                                         "\" (expected \"" + info.text_model_type + "\")");
  return tc;
}

// Features the engine does not implement: attention biases, and MoE on gemma4_unified (whose
// decoder has no MoE block).
Status CheckRefusedFeatures(const ParseContext& x) {
  const Fields& T = x.T;
  if (x.unified) {
    bool moe = false;
    CFG_ASSIGN(moe, T.Bool("enable_moe_block", false));
    if (moe)
      return Unimplemented("ParseModelConfig: " + T.Name("enable_moe_block") +
                           " = true: Mixture-of-Experts layers are not supported on " + x.info.name);
  }
  bool attention_bias = false;
  CFG_ASSIGN(attention_bias, T.Bool("attention_bias", false));
  if (attention_bias)
    return Unimplemented("ParseModelConfig: " + T.Name("attention_bias") +
                         " = true is not supported (Gemma has no projection biases)");
  return Status::Ok();
}

// Gemma 4 enable_moe_block: every layer adds a routed block of num_experts experts, top_k_experts
// per token, each of width moe_intermediate_size (docs/moe.md).
Status ParseMoe(const ParseContext& x, ModelConfig* c) {
  const Fields& T = x.T;
  if (!x.g4 || x.unified) return Status::Ok();
  bool moe = false;
  CFG_ASSIGN(moe, T.Bool("enable_moe_block", false));
  if (!moe) return Status::Ok();
  constexpr int64_t kMaxExperts = 4096;
  CFG_ASSIGN(c->num_experts, T.Int("num_experts", std::nullopt));
  TESSERA_RETURN_IF_ERROR(CheckRange(T.Name("num_experts"), c->num_experts, 1, kMaxExperts));
  CFG_ASSIGN(c->top_k_experts, T.Int("top_k_experts", std::nullopt));
  TESSERA_RETURN_IF_ERROR(CheckRange(T.Name("top_k_experts"), c->top_k_experts, 1, c->num_experts));
  CFG_ASSIGN(c->moe_intermediate_size, T.Int("moe_intermediate_size", std::nullopt));
  return CheckRange(T.Name("moe_intermediate_size"), c->moe_intermediate_size, 1, kMaxIntermediate);
}

// Vocabulary, widths, layer and head counts, head_dim.
Status ParseSizes(const ParseContext& x, ModelConfig* c) {
  const Fields& T = x.T;
  CFG_ASSIGN(c->vocab_size, T.Int("vocab_size", x.g4 ? 262144 : 262208));
  TESSERA_RETURN_IF_ERROR(CheckRange(T.Name("vocab_size"), c->vocab_size, 1, kMaxVocab));
  CFG_ASSIGN(c->hidden_size, T.Int("hidden_size", std::nullopt));
  TESSERA_RETURN_IF_ERROR(CheckRange(T.Name("hidden_size"), c->hidden_size, 1, kMaxHidden));
  if (T.Present("intermediate_size") && T.Find("intermediate_size")->is_array())
    return Bad(T.Name("intermediate_size"), "must be one integer (per-layer lists are a Gemma 3n feature)");
  CFG_ASSIGN(c->intermediate_size, T.Int("intermediate_size", std::nullopt));
  TESSERA_RETURN_IF_ERROR(CheckRange(T.Name("intermediate_size"), c->intermediate_size, 1, kMaxIntermediate));
  CFG_ASSIGN(c->num_hidden_layers, T.Int("num_hidden_layers", std::nullopt));
  TESSERA_RETURN_IF_ERROR(CheckRange(T.Name("num_hidden_layers"), c->num_hidden_layers, 1, kMaxLayers));
  CFG_ASSIGN(c->num_attention_heads, T.Int("num_attention_heads", 8));
  TESSERA_RETURN_IF_ERROR(CheckRange(T.Name("num_attention_heads"), c->num_attention_heads, 1, kMaxHeads));
  CFG_ASSIGN(c->num_key_value_heads, T.Int("num_key_value_heads", 4));
  TESSERA_RETURN_IF_ERROR(CheckRange(T.Name("num_key_value_heads"), c->num_key_value_heads, 1, kMaxHeads));
  if (c->num_attention_heads % c->num_key_value_heads != 0)
    return Bad(T.Name("num_key_value_heads"),
               "= " + std::to_string(c->num_key_value_heads) +
                   " does not divide num_attention_heads = " + std::to_string(c->num_attention_heads));
  CFG_ASSIGN(c->head_dim, T.Int("head_dim", 256));
  TESSERA_RETURN_IF_ERROR(CheckRange(T.Name("head_dim"), c->head_dim, 2, kMaxHeadDim));
  if (c->head_dim % 2 != 0)
    return Bad(T.Name("head_dim"), "= " + std::to_string(c->head_dim) + " must be even (RoPE pairs)");
  if (!x.g4 && c->hidden_size % c->num_attention_heads != 0)  // Gemma3TextConfig.validate_architecture
    return Bad(T.Name("hidden_size"),
               "= " + std::to_string(c->hidden_size) +
                   " is not a multiple of num_attention_heads = " + std::to_string(c->num_attention_heads));
  return Status::Ok();
}

// layer_types, or the sliding/full pattern; Gemma 4's last layer is always full.
Status ParseLayerTypes(const ParseContext& x, ModelConfig* c) {
  const Fields& T = x.T;
  const int64_t L = c->num_hidden_layers;
  if (T.HasValue("layer_types")) {
    const Json& lt = *T.Find("layer_types");
    if (!lt.is_array()) return Bad(T.Name("layer_types"), "= " + Show(lt) + " must be a list");
    if (static_cast<int64_t>(lt.size()) != L)
      return Bad(T.Name("layer_types"),
                 "has " + std::to_string(lt.size()) + " entries but num_hidden_layers = " + std::to_string(L));
    for (size_t i = 0; i < lt.size(); ++i) {
      kv::LayerKind k;
      if (!lt[i].is_string() || !ParseLayerType(lt[i].get_ref<const std::string&>(), &k))
        return Bad(T.Name("layer_types") + "[" + std::to_string(i) + "]",
                   "= " + Show(lt[i]) + " is not a supported layer type (sliding_attention, full_attention)");
      c->layer_types.push_back(k);
    }
  } else {
    int64_t pattern = 6;
    if (!x.g4) {  // Gemma 4 hard-codes 6 (configuration_gemma4.py:189)
      CFG_ASSIGN(pattern, T.Int("sliding_window_pattern", 6));
      TESSERA_RETURN_IF_ERROR(CheckRange(T.Name("sliding_window_pattern"), pattern, 1, kMaxLayers));
    }
    for (int64_t i = 0; i < L; ++i)
      c->layer_types.push_back((i + 1) % pattern != 0 ? kv::LayerKind::kSliding : kv::LayerKind::kFull);
  }
  if (x.g4) c->layer_types.back() = kv::LayerKind::kFull;
  return Status::Ok();
}

// sliding_window (null only where no layer slides, on Gemma 3).
Status ParseSlidingWindow(const ParseContext& x, ModelConfig* c) {
  const Fields& T = x.T;
  bool any_sliding = false;
  for (kv::LayerKind k : c->layer_types) any_sliding = any_sliding || k == kv::LayerKind::kSliding;
  std::optional<int64_t> window;
  CFG_ASSIGN(window, T.OptInt("sliding_window", x.g4 ? (x.unified ? 1024 : 512) : 4096, false));
  if (window) {
    TESSERA_RETURN_IF_ERROR(CheckRange(T.Name("sliding_window"), *window, 1, kMaxPositions));
    c->sliding_window = *window;
  } else if (x.g4) {
    return Bad(T.Name("sliding_window"), "must not be null");
  } else if (any_sliding) {
    return Bad(T.Name("sliding_window"), "= null but layer_types has sliding layers");
  }
  return Status::Ok();
}

// attention_k_eq_v and each layer's head_dim / KV heads as configured (checked afterwards by
// CheckAttentionWidths): the global values, and on Gemma 4 full layers per_layer_config or the
// global_* keys.
StatusOr<LayerWidths> AttentionWidths(const ParseContext& x, ModelConfig* c) {
  const Fields& T = x.T;
  const int64_t L = c->num_hidden_layers;
  CFG_ASSIGN(c->attention_k_eq_v, x.g4 ? T.Bool("attention_k_eq_v", false) : StatusOr<bool>(false));
  LayerWidths w{std::vector<int64_t>(L, c->head_dim), std::vector<int64_t>(L, c->num_key_value_heads),
                std::vector<std::string>(L, T.Name("head_dim")),
                std::vector<std::string>(L, T.Name("num_key_value_heads")), {}};
  if (!x.g4) return w;
  if (T.HasValue("per_layer_config")) {
    std::map<int64_t, LayerOverride> overrides;
    CFG_ASSIGN(overrides, ParsePerLayerConfig(*T.Find("per_layer_config"), T.Name("per_layer_config"), L));
    for (const auto& [i, o] : overrides) {
      const std::string lf = T.Name("per_layer_config") + "." + std::to_string(i);
      if (o.head_dim) w.head_dims[i] = *o.head_dim, w.hd_src[i] = lf + ".head_dim";
      if (o.num_kv_heads) w.kv_heads[i] = *o.num_kv_heads, w.kv_src[i] = lf + ".num_key_value_heads";
    }
    return w;
  }
  // configuration_gemma4.py:208-221: full layers get global_head_dim (default 512) and, only
  // when attention_k_eq_v, num_global_key_value_heads.
  int64_t ghd = 0;
  CFG_ASSIGN(ghd, T.Int("global_head_dim", 512));
  std::optional<int64_t> gkv;
  CFG_ASSIGN(gkv, T.OptInt("num_global_key_value_heads", std::nullopt, false));
  for (int64_t i = 0; i < L; ++i) {
    if (c->layer_types[i] != kv::LayerKind::kFull) continue;
    w.head_dims[i] = ghd, w.hd_src[i] = T.Name("global_head_dim");
    if (gkv && c->attention_k_eq_v) w.kv_heads[i] = *gkv, w.kv_src[i] = T.Name("num_global_key_value_heads");
  }
  return w;
}

// Validates the widths and requires one width per layer kind (HF resolves RoPE per layer type and
// raises when layers of one type differ: integrations/heterogeneity/configuration_utils.py:228-242);
// sets the global (full-layer) widths.
Status CheckAttentionWidths(const ParseContext& x, LayerWidths* w, ModelConfig* c) {
  const std::vector<int64_t>& head_dims = w->head_dims;
  const std::vector<int64_t>& kv_heads = w->kv_heads;
  for (int64_t i = 0; i < c->num_hidden_layers; ++i) {
    if (head_dims[i] < 2 || head_dims[i] > kMaxHeadDim || head_dims[i] % 2 != 0)
      return Bad(w->hd_src[i], "= " + std::to_string(head_dims[i]) + " (layer " + std::to_string(i) +
                                   ") must be even and in [2, 512]");
    if (kv_heads[i] < 1 || kv_heads[i] > kMaxHeads || c->num_attention_heads % kv_heads[i] != 0)
      return Bad(w->kv_src[i],
                 "= " + std::to_string(kv_heads[i]) + " (layer " + std::to_string(i) +
                     ") must be >= 1 and divide num_attention_heads = " + std::to_string(c->num_attention_heads));
    auto [it, inserted] = w->first_of_kind.emplace(c->layer_types[i], i);
    const int64_t j = it->second;
    if (!inserted && (head_dims[i] != head_dims[j] || kv_heads[i] != kv_heads[j]))
      return Bad(x.T.Name("per_layer_config"),
                 "layer " + std::to_string(i) + ": head_dim " + std::to_string(head_dims[i]) +
                     " / num_key_value_heads " + std::to_string(kv_heads[i]) + " differ from layer " +
                     std::to_string(j) + " of the same type (" + std::to_string(head_dims[j]) + " / " +
                     std::to_string(kv_heads[j]) + ")");
  }
  auto full = w->first_of_kind.find(kv::LayerKind::kFull);
  c->global_head_dim = full != w->first_of_kind.end() ? head_dims[full->second] : c->head_dim;
  c->num_global_key_value_heads = full != w->first_of_kind.end() ? kv_heads[full->second] : c->num_key_value_heads;
  return Status::Ok();
}

// rope_parameters: null (absent) or an object keyed by layer type.
StatusOr<const Json*> RopeParametersObject(const Fields& T) {
  const Json* rp = T.Find("rope_parameters");
  if (rp == nullptr || rp->is_null()) return static_cast<const Json*>(nullptr);
  if (!rp->is_object()) return Bad(T.Name("rope_parameters"), "= " + Show(*rp) + " must be an object");
  for (auto it = rp->begin(); it != rp->end(); ++it)
    if (it.key() != "sliding_attention" && it.key() != "full_attention")
      return Bad(T.Name("rope_parameters"),
                 "key \"" + it.key().substr(0, 60) +
                     "\": expected entries keyed by layer type (sliding_attention, full_attention)");
  return rp;
}

// The rope of each layer kind: Gemma 3 from its legacy keys, Gemma 4 from rope_parameters (or its
// defaults when there are none).
Status ParseRopeParameters(const ParseContext& x, const std::map<kv::LayerKind, int64_t>& first_of_kind,
                           ModelConfig* c) {
  const Fields& T = x.T;
  const Json* rp = nullptr;
  CFG_ASSIGN(rp, RopeParametersObject(T));
  auto entry = [&](const char* key) -> const Json* {
    if (rp == nullptr) return nullptr;
    auto it = rp->find(key);
    return it == rp->end() ? nullptr : &*it;
  };
  std::optional<double> top_theta, prf;
  CFG_ASSIGN(prf, T.OptNum("partial_rotary_factor", std::nullopt));
  const std::string rf = T.Name("rope_parameters");
  if (!x.g4) {
    // configuration_gemma3.py:132-155: full <- rope_theta (default 1e6) + rope_scaling;
    // sliding <- rope_local_base_freq (default 1e4).
    std::optional<double> full_theta, local_theta;
    CFG_ASSIGN(full_theta, T.OptNum("rope_theta", 1'000'000.0));
    CFG_ASSIGN(local_theta, T.OptNum("rope_local_base_freq", 10'000.0));
    CFG_ASSIGN(c->rope_full,
               ParseRope(entry("full_attention"), rf + ".full_attention", T.Find("rope_scaling"), full_theta, prf));
    CFG_ASSIGN(c->rope_sliding,
               ParseRope(entry("sliding_attention"), rf + ".sliding_attention", nullptr, local_theta, prf));
  } else if (rp == nullptr) {
    // configuration_gemma4.py:201-206 defaults.
    c->rope_sliding = RopeConfig{RopeType::kDefault, 10'000.0, 1.0, 1.0, 1.0};
    c->rope_full = RopeConfig{RopeType::kProportional, 1'000'000.0, 1.0, 0.25, 1.0};
  } else {
    // Gemma 4 keeps rope_parameters as given; standardize_rope_params fills a missing rope_theta /
    // partial_rotary_factor from top-level keys (modeling_rope_utils.py:845-854).
    CFG_ASSIGN(top_theta, T.OptNum("rope_theta", std::nullopt));
    for (kv::LayerKind k : {kv::LayerKind::kSliding, kv::LayerKind::kFull}) {
      if (!first_of_kind.count(k)) continue;
      const Json* e = entry(LayerTypeKey(k));
      if (e == nullptr || e->is_null())
        return Bad(rf + "." + LayerTypeKey(k), "is missing but layer_types uses " + std::string(LayerTypeKey(k)));
      RopeConfig r;
      CFG_ASSIGN(r, ParseRope(e, rf + "." + LayerTypeKey(k), nullptr, top_theta, prf));
      (k == kv::LayerKind::kSliding ? c->rope_sliding : c->rope_full) = r;
    }
  }
  return Status::Ok();
}

// The score scale (Gemma 3 query_pre_attn_scalar) and the two soft caps.
Status ParseScaleAndSoftcaps(const ParseContext& x, ModelConfig* c) {
  const Fields& T = x.T;
  if (!x.g4) {
    std::optional<double> qpas;
    CFG_ASSIGN(qpas, T.OptNum("query_pre_attn_scalar", 256.0));
    if (!qpas) return Bad(T.Name("query_pre_attn_scalar"), "must not be null");
    if (!(*qpas > 0.0) || !std::isfinite(*qpas))
      return Bad(T.Name("query_pre_attn_scalar"), "= " + Str(*qpas) + " must be > 0");
    c->query_pre_attn_scalar = qpas;
    c->attention_scale = 1.0 / std::sqrt(*qpas);
    CFG_ASSIGN(c->attn_logit_softcapping, T.OptNum("attn_logit_softcapping", std::nullopt));
  } else {
    c->attention_scale = 1.0;  // modeling_gemma4.py:1156
  }
  CFG_ASSIGN(c->final_logit_softcapping, T.OptNum("final_logit_softcapping", std::nullopt));
  for (auto [name, cap] : {std::pair{"attn_logit_softcapping", c->attn_logit_softcapping},
                           std::pair{"final_logit_softcapping", c->final_logit_softcapping}})
    if (cap && (!(*cap > 0.0) || !std::isfinite(*cap)))
      return Bad(T.Name(name), "= " + Str(*cap) + " must be > 0 (or null)");
  return Status::Ok();
}

// rms_norm_eps, hidden_activation, max_position_embeddings.
Status ParseNormActivationPositions(const ParseContext& x, ModelConfig* c) {
  const Fields& T = x.T;
  CFG_ASSIGN(c->rms_norm_eps, T.Num("rms_norm_eps", 1e-6));
  if (!(c->rms_norm_eps > 0.0 && c->rms_norm_eps < 1.0))
    return Bad(T.Name("rms_norm_eps"), "= " + Str(c->rms_norm_eps) + " must be in (0, 1)");

  std::optional<std::string> act;
  CFG_ASSIGN(act, T.OptString("hidden_activation", std::string("gelu_pytorch_tanh")));
  if (!act || (*act != "gelu_pytorch_tanh" && *act != "gelu_new"))
    return Unimplemented("ParseModelConfig: " + T.Name("hidden_activation") + " = " +
                         (act ? "\"" + act->substr(0, 60) + "\"" : "null") + " is not supported (gelu_pytorch_tanh)");

  CFG_ASSIGN(c->max_position_embeddings, T.Int("max_position_embeddings", x.unified ? 262144 : 131072));
  TESSERA_RETURN_IF_ERROR(
      CheckRange(T.Name("max_position_embeddings"), c->max_position_embeddings, 1, kMaxPositions));
  return Status::Ok();
}

// use_bidirectional_attention: a bool on Gemma 3, null | "vision" | "all" on Gemma 4.
Status ParseBidirectional(const ParseContext& x, ModelConfig* c) {
  const Fields& T = x.T;
  if (!x.g4) {
    const Json* b = T.Find("use_bidirectional_attention");
    if (b != nullptr && !b->is_null() && !b->is_boolean())
      return Bad(T.Name("use_bidirectional_attention"), "= " + Show(*b) + " must be true or false for Gemma 3");
    c->bidirectional =
        (b != nullptr && b->is_boolean() && b->get<bool>()) ? BidirectionalMode::kAll : BidirectionalMode::kNone;
    return Status::Ok();
  }
  std::optional<std::string> mode;
  CFG_ASSIGN(mode, T.OptString("use_bidirectional_attention",
                               x.unified ? std::optional<std::string>("vision") : std::nullopt));
  if (!mode)
    c->bidirectional = BidirectionalMode::kNone;
  else if (*mode == "vision")
    c->bidirectional = BidirectionalMode::kVision;
  else if (*mode == "all")
    c->bidirectional = BidirectionalMode::kAll;
  else
    return Bad(T.Name("use_bidirectional_attention"),
               "= \"" + mode->substr(0, 60) + "\" must be null, \"vision\" or \"all\"");
  return Status::Ok();
}

// Gemma 4 only: KV sharing, the double-wide MLP and per-layer embeddings (PLE).
Status ParseKvSharingAndPle(const ParseContext& x, ModelConfig* c) {
  if (!x.g4) return Status::Ok();
  const Fields& T = x.T;
  const int64_t L = c->num_hidden_layers;
  CFG_ASSIGN(c->num_kv_shared_layers, T.Int("num_kv_shared_layers", 0));
  TESSERA_RETURN_IF_ERROR(CheckRange(T.Name("num_kv_shared_layers"), c->num_kv_shared_layers, 0, L - 1));
  CFG_ASSIGN(c->use_double_wide_mlp, T.Bool("use_double_wide_mlp", false));
  if (x.unified) return Status::Ok();  // gemma4_unified has no PLE (modular_gemma4_unified.py:461-463)
  CFG_ASSIGN(c->hidden_size_per_layer_input, T.Int("hidden_size_per_layer_input", 256));  // 0 = no PLE
  TESSERA_RETURN_IF_ERROR(
      CheckRange(T.Name("hidden_size_per_layer_input"), c->hidden_size_per_layer_input, 0, kMaxHidden));
  if (c->has_ple()) {
    CFG_ASSIGN(c->vocab_size_per_layer_input, T.Int("vocab_size_per_layer_input", 262144));
    TESSERA_RETURN_IF_ERROR(
        CheckRange(T.Name("vocab_size_per_layer_input"), c->vocab_size_per_layer_input, 1, kMaxVocab));
    if (c->hidden_size_per_layer_input * L > kMaxHidden * 16)
      return Bad(T.Name("hidden_size_per_layer_input"), "= " + std::to_string(c->hidden_size_per_layer_input) +
                                                            " times " + std::to_string(L) + " layers is too large");
  }
  return Status::Ok();
}

// eos_token_id from the first of `first`, `second` that has it: an int, a list of ints, or null
// (none); absent from both, [1].
StatusOr<std::vector<int64_t>> ParseEosTokenIds(const Fields& first, const Fields* second) {
  const Fields* holder =
      first.Present("eos_token_id") ? &first : (second && second->Present("eos_token_id") ? second : nullptr);
  if (holder == nullptr) return std::vector<int64_t>{1};
  std::vector<int64_t> ids;
  const Json& e = *holder->Find("eos_token_id");
  if (e.is_array()) {
    for (size_t i = 0; i < e.size(); ++i) {
      if (!e[i].is_number_integer())
        return Bad(holder->Name("eos_token_id") + "[" + std::to_string(i) + "]",
                   "= " + Show(e[i]) + " must be an integer");
      ids.push_back(e[i].get<int64_t>());
    }
  } else if (!e.is_null()) {
    int64_t id = 0;
    CFG_ASSIGN(id, holder->Int("eos_token_id", std::nullopt));
    ids.push_back(id);
  }
  return ids;
}

// tie_word_embeddings and the bos / pad / eos ids: for multimodal types the root value wins, then
// text_config's; ids must lie in the vocabulary.
Status ParseTyingAndTokenIds(const ParseContext& x, ModelConfig* c) {
  const Fields& first = x.info.multimodal ? x.R : x.T;
  const Fields* second = x.info.multimodal ? &x.T : nullptr;
  CFG_ASSIGN(c->tie_word_embeddings,
             first.Present("tie_word_embeddings") && !first.Find("tie_word_embeddings")->is_null()
                 ? first.Bool("tie_word_embeddings", true)
                 : (second ? second->Bool("tie_word_embeddings", true) : StatusOr<bool>(true)));
  CFG_ASSIGN(c->bos_token_id, TokenId(first, second, "bos_token_id", 2));
  CFG_ASSIGN(c->pad_token_id, TokenId(first, second, "pad_token_id", 0));
  CFG_ASSIGN(c->eos_token_ids, ParseEosTokenIds(first, second));
  auto check_id = [&](const std::string& field, std::optional<int64_t> id) -> Status {
    if (id && (*id < 0 || *id >= c->vocab_size))
      return Bad(field,
                 "= " + std::to_string(*id) + " is outside the vocabulary [0, " + std::to_string(c->vocab_size) + ")");
    return Status::Ok();
  };
  TESSERA_RETURN_IF_ERROR(check_id("bos_token_id", c->bos_token_id));
  TESSERA_RETURN_IF_ERROR(check_id("pad_token_id", c->pad_token_id));
  for (int64_t id : c->eos_token_ids) TESSERA_RETURN_IF_ERROR(check_id("eos_token_id", id));
  return Status::Ok();
}

// One multimodal placeholder id from the root under any of its `keys` (which must agree), else
// `def`. Placeholder ids may lie beyond the text vocabulary (Gemma 3 checks image_token_id >=
// vocab_size, modeling_gemma3.py:844), so they are only required to be non-negative.
Status MultimodalTokenId(const Fields& R, std::initializer_list<const char*> keys, std::optional<int64_t> def,
                         std::optional<int64_t>* out) {
  const char* found = nullptr;
  for (const char* k : keys) {
    if (!R.Present(k)) continue;
    std::optional<int64_t> v;
    CFG_ASSIGN(v, R.OptInt(k, std::nullopt, false));
    if (found != nullptr && v != *out)
      return Bad(k, "= " + (v ? std::to_string(*v) : std::string("null")) + " contradicts " + found);
    found = k;
    *out = v;
  }
  if (found == nullptr) *out = def;
  if (*out && **out < 0) return Bad(found ? found : *keys.begin(), "= " + std::to_string(**out) + " must be >= 0");
  return Status::Ok();
}

// The placeholder token ids of the multimodal wrappers (absent for text-only types).
Status ParseMultimodalTokenIds(const ParseContext& x, ModelConfig* c) {
  if (!x.info.multimodal) return Status::Ok();
  const Fields& R = x.R;
  if (!x.g4) {  // configuration_gemma3.py:195-210 (attribute_map: *_token_id -> *_token_index)
    TESSERA_RETURN_IF_ERROR(MultimodalTokenId(R, {"image_token_index", "image_token_id"}, 262144, &c->image_token_id));
    TESSERA_RETURN_IF_ERROR(MultimodalTokenId(R, {"boi_token_index", "boi_token_id"}, 255999, &c->boi_token_id));
    TESSERA_RETURN_IF_ERROR(MultimodalTokenId(R, {"eoi_token_index", "eoi_token_id"}, 256000, &c->eoi_token_id));
    TESSERA_RETURN_IF_ERROR(MultimodalTokenId(R, {"mm_tokens_per_image"}, 256, &c->mm_tokens_per_image));
    if (c->mm_tokens_per_image && *c->mm_tokens_per_image < 1)
      return Bad("mm_tokens_per_image", "= " + std::to_string(*c->mm_tokens_per_image) + " must be >= 1");
    return Status::Ok();
  }
  // configuration_gemma4.py:372-378, configuration_gemma4_unified.py:333-339
  TESSERA_RETURN_IF_ERROR(MultimodalTokenId(R, {"image_token_id", "image_token_index"}, 258880, &c->image_token_id));
  TESSERA_RETURN_IF_ERROR(MultimodalTokenId(R, {"boi_token_id", "boi_token_index"}, 255999, &c->boi_token_id));
  TESSERA_RETURN_IF_ERROR(MultimodalTokenId(R, {"eoi_token_id", "eoi_token_index"}, 258882, &c->eoi_token_id));
  TESSERA_RETURN_IF_ERROR(MultimodalTokenId(R, {"video_token_id", "video_token_index"}, 258884, &c->video_token_id));
  TESSERA_RETURN_IF_ERROR(MultimodalTokenId(R, {"audio_token_id", "audio_token_index"}, 258881, &c->audio_token_id));
  TESSERA_RETURN_IF_ERROR(MultimodalTokenId(R, {"boa_token_id", "boa_token_index"}, 256000, &c->boa_token_id));
  TESSERA_RETURN_IF_ERROR(MultimodalTokenId(R, {"eoa_token_index", "eoa_token_id"}, 258883, &c->eoa_token_id));
  return Status::Ok();
}

// ModelConfig::layers: each layer's kind, widths, window, KV source and rope.
Status ResolveLayers(const ParseContext& x, const LayerWidths& w, ModelConfig* c) {
  const int64_t L = c->num_hidden_layers;
  std::vector<kv::LayerKind> kinds = c->layer_types;
  StatusOr<kv::LayerMap> map = kv::LayerMap::Build(kinds, c->num_kv_shared_layers);
  if (!map.ok())  // configuration_gemma4.py:236-241: a shared type with no producer
    return Bad(x.T.Name("num_kv_shared_layers"),
               "= " + std::to_string(c->num_kv_shared_layers) + ": " + map.status().message());
  c->layers.resize(L);
  for (int64_t i = 0; i < L; ++i) {
    LayerConfig& l = c->layers[i];
    l.kind = c->layer_types[i];
    l.head_dim = w.head_dims[i];
    l.num_kv_heads = w.kv_heads[i];
    l.sliding_window = l.kind == kv::LayerKind::kSliding ? c->sliding_window : 0;
    l.kv_source_layer = map.value().owner(i);
    l.has_kv_proj = l.kv_source_layer == i;
    l.has_v_proj = l.has_kv_proj && !(c->attention_k_eq_v && l.kind == kv::LayerKind::kFull);
    // modeling_gemma4.py:1054-1059: double width only on KV-shared ("reuse") layers.
    l.intermediate_size = c->intermediate_size * (c->use_double_wide_mlp && !l.has_kv_proj ? 2 : 1);
    l.rope = c->rope(l.kind);
  }
  return Status::Ok();
}

// The ParseModelConfig body; may assume `root` is an object.
StatusOr<ModelConfig> Parse(const Json& root) {
  ModelConfig c;
  const Fields R(root, "");
  const TypeInfo* info = nullptr;
  CFG_ASSIGN(info, ResolveModelType(R, &c));
  const Json* text = nullptr;
  CFG_ASSIGN(text, TextConfig(root, R, *info));
  const Fields T(*text, info->multimodal ? "text_config." : "");
  const ParseContext x{*info, R, T, c.is_gemma4(), c.is_gemma4_unified()};

  TESSERA_RETURN_IF_ERROR(CheckRefusedFeatures(x));
  TESSERA_RETURN_IF_ERROR(ParseSizes(x, &c));
  TESSERA_RETURN_IF_ERROR(ParseMoe(x, &c));
  TESSERA_RETURN_IF_ERROR(ParseLayerTypes(x, &c));
  TESSERA_RETURN_IF_ERROR(ParseSlidingWindow(x, &c));
  StatusOr<LayerWidths> widths = AttentionWidths(x, &c);
  if (!widths.ok()) return widths.status();
  TESSERA_RETURN_IF_ERROR(CheckAttentionWidths(x, &widths.value(), &c));
  TESSERA_RETURN_IF_ERROR(ParseRopeParameters(x, widths.value().first_of_kind, &c));
  TESSERA_RETURN_IF_ERROR(ParseScaleAndSoftcaps(x, &c));
  TESSERA_RETURN_IF_ERROR(ParseNormActivationPositions(x, &c));
  TESSERA_RETURN_IF_ERROR(ParseBidirectional(x, &c));
  TESSERA_RETURN_IF_ERROR(ParseKvSharingAndPle(x, &c));
  TESSERA_RETURN_IF_ERROR(ParseTyingAndTokenIds(x, &c));
  TESSERA_RETURN_IF_ERROR(ParseMultimodalTokenIds(x, &c));
  TESSERA_RETURN_IF_ERROR(ResolveLayers(x, widths.value(), &c));
  return c;
}

}  // namespace

const char* ModelTypeName(ModelType t) {
  for (const TypeInfo& info : kTypes)
    if (info.type == t) return info.name;
  return "?";
}

const char* BidirectionalModeName(BidirectionalMode m) {
  switch (m) {
    case BidirectionalMode::kNone: return "none";
    case BidirectionalMode::kVision: return "vision";
    case BidirectionalMode::kAll: return "all";
  }
  return "?";
}

StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text) {
  // Before parsing: a deep document parses, then overflows the stack in a recursive copy.
  TESSERA_RETURN_IF_ERROR(io::CheckJsonNesting(json_text, "ParseModelConfig"));
  try {
    const Json root = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) return InvalidArgument("ParseModelConfig: not valid JSON");
    if (!root.is_object())
      return InvalidArgument("ParseModelConfig: the config must be a JSON object, got " +
                             std::string(root.type_name()));
    return Parse(root);
  } catch (const std::exception& e) {  // nothing above should throw; never let it cross the API
    return InvalidArgument(std::string("ParseModelConfig: ") + e.what());
  }
}

StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  std::string file = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    file = path + (path.back() == '/' ? "" : "/") + "config.json";
  // A FIFO, device or directory in its place is refused by name before anything is read.
  StatusOr<std::string> read = io::ReadInputFile(file, "config", kMaxConfigBytes);
  if (!read.ok()) return Status(read.status().code(), "LoadModelConfig: " + read.status().message());
  const std::string& text = read.value();
  StatusOr<ModelConfig> c = ParseModelConfig(text);
  if (!c.ok()) return Status(c.status().code(), "LoadModelConfig: '" + file + "': " + c.status().message());
  return c;
}

}  // namespace tessera::model
