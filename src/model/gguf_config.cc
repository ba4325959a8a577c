#include "model/gguf_config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

namespace tessera::model {
namespace {

using Json = nlohmann::json;

// rope_freqs entries at or above this mark a pair the converter left unrotated (it writes 1e30:
// ggml divides the pair's frequency by it, which leaves the pair in place).
constexpr float kUnrotatedFactor = 1e20f;

// Typed metadata access for one architecture; every error names the file and the key.
class Meta {
 public:
  Meta(const io::GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}

  std::string Key(const std::string& name) const { return arch_ + "." + name; }
  bool Has(const std::string& name) const { return f_.Has(Key(name)); }

  StatusOr<int64_t> Int(const std::string& name) const { return f_.GetInt(Key(name)); }
  StatusOr<std::optional<int64_t>> OptInt(const std::string& name) const {
    if (!Has(name)) return std::optional<int64_t>();
    StatusOr<int64_t> v = Int(name);
    if (!v.ok()) return v.status();
    return std::optional<int64_t>(v.value());
  }
  StatusOr<std::optional<double>> OptFloat(const std::string& name) const {
    if (!Has(name)) return std::optional<double>();
    StatusOr<double> v = f_.GetFloat(Key(name));
    if (!v.ok()) return v.status();
    return std::optional<double>(v.value());
  }
  // A per-layer value written either as one integer or as an array of `layers` integers.
  StatusOr<std::vector<int64_t>> PerLayer(const std::string& name, int64_t layers) const {
    StatusOr<io::GgufType> type = f_.TypeOf(Key(name));
    if (!type.ok()) return type.status();
    if (type.value() != io::GgufType::kArray) {
      StatusOr<int64_t> v = Int(name);
      if (!v.ok()) return v.status();
      return std::vector<int64_t>(static_cast<size_t>(layers), v.value());
    }
    StatusOr<std::vector<int64_t>> a = f_.GetIntArray(Key(name));
    if (!a.ok()) return a.status();
    if (static_cast<int64_t>(a.value().size()) != layers)
      return Bad(name, "has " + std::to_string(a.value().size()) + " entries but block_count = " +
                           std::to_string(layers));
    return a;
  }

  Status Bad(const std::string& name, const std::string& detail) const {
    return InvalidArgument("GGUF '" + f_.path() + "': " + Key(name) + " " + detail);
  }
  Status Refused(const std::string& what) const {
    return Unimplemented("GGUF '" + f_.path() + "': " + what);
  }
  const io::GgufFile& file() const { return f_; }
  const std::string& arch() const { return arch_; }

 private:
  const io::GgufFile& f_;
  std::string arch_;
};

template <typename T>
Status Assign(T* out, StatusOr<T> v) {
  if (!v.ok()) return v.status();
  *out = std::move(v.value());
  return Status::Ok();
}

// Everything both families share, gathered before the family-specific parts.
struct Common {
  int64_t layers = 0, hidden = 0, heads = 0, head_dim = 0, vocab = 0;
  std::vector<int64_t> kv_heads, ff;
  std::vector<bool> sliding;  // per layer
  std::optional<int64_t> window;
};

// The per-layer sliding flags: Gemma 3 may give an array, a period, or nothing (llama.cpp's period
// 6: every 6th layer full); Gemma 4 must give the array.
Status LayerPattern(const Meta& m, bool g4, GgufModelConfig* out, Common* c) {
  const std::string key = "attention.sliding_window_pattern";
  c->sliding.assign(static_cast<size_t>(c->layers), false);
  if (!g4 && (!c->window || *c->window == 0)) {
    c->window.reset();  // no sliding window: every layer is full
    return Status::Ok();
  }
  if (!m.Has(key)) {
    if (g4) return m.Bad(key, "is missing (Gemma 4 files list the sliding layers)");
    for (int64_t i = 0; i < c->layers; ++i) c->sliding[i] = i % 6 < 5;
    out->inferred.push_back(m.Key(key) + " absent: every 6th layer full (llama.cpp's Gemma 3 default)");
    return Status::Ok();
  }
  StatusOr<io::GgufType> type = m.file().TypeOf(m.Key(key));
  if (!type.ok()) return type.status();
  if (type.value() == io::GgufType::kArray) {
    StatusOr<std::vector<bool>> a = m.file().GetBoolArray(m.Key(key));
    if (!a.ok()) return a.status();
    if (static_cast<int64_t>(a.value().size()) != c->layers)
      return m.Bad(key, "has " + std::to_string(a.value().size()) + " entries but block_count = " +
                            std::to_string(c->layers));
    c->sliding = a.value();
  } else {
    int64_t n = 0;
    TESSERA_RETURN_IF_ERROR(Assign(&n, m.Int(key)));
    if (n < 0 || n > c->layers) return m.Bad(key, "= " + std::to_string(n) + " is not a layer period");
    for (int64_t i = 0; i < c->layers; ++i) c->sliding[i] = n == 0 || i % n < n - 1;
  }
  // transformers forces Gemma 4's last layer to full; a file saying otherwise is not one of its models.
  if (g4 && c->sliding.back()) return m.Bad(key, "marks the last layer sliding (Gemma 4's last layer is full)");
  return Status::Ok();
}

Status ReadCommon(const Meta& m, bool g4, GgufModelConfig* out, Common* c) {
  TESSERA_RETURN_IF_ERROR(Assign(&c->layers, m.Int("block_count")));
  if (c->layers < 1 || c->layers > 1024) return m.Bad("block_count", "= " + std::to_string(c->layers) + " is out of range");
  TESSERA_RETURN_IF_ERROR(Assign(&c->hidden, m.Int("embedding_length")));
  std::vector<int64_t> heads;
  TESSERA_RETURN_IF_ERROR(Assign(&heads, m.PerLayer("attention.head_count", c->layers)));
  if (std::adjacent_find(heads.begin(), heads.end(), std::not_equal_to<>()) != heads.end())
    return m.Refused(m.Key("attention.head_count") + ": query head counts that differ per layer are not supported");
  c->heads = heads[0];
  if (c->heads < 1) return m.Bad("attention.head_count", "= " + std::to_string(c->heads) + " must be >= 1");
  c->kv_heads = heads;  // llama.cpp's default: as many KV heads as query heads
  if (m.Has("attention.head_count_kv"))
    TESSERA_RETURN_IF_ERROR(Assign(&c->kv_heads, m.PerLayer("attention.head_count_kv", c->layers)));
  TESSERA_RETURN_IF_ERROR(Assign(&c->ff, m.PerLayer("feed_forward_length", c->layers)));
  std::optional<int64_t> kl, vl;
  TESSERA_RETURN_IF_ERROR(Assign(&kl, m.OptInt("attention.key_length")));
  TESSERA_RETURN_IF_ERROR(Assign(&vl, m.OptInt("attention.value_length")));
  c->head_dim = kl.value_or(c->hidden / c->heads);
  if (vl.value_or(c->hidden / c->heads) != c->head_dim)
    return m.Refused(m.Key("attention.value_length") + " = " + std::to_string(*vl) + " differs from key_length " +
                     std::to_string(c->head_dim) + " (Gemma's K and V heads have one width)");
  TESSERA_RETURN_IF_ERROR(Assign(&c->window, m.OptInt("attention.sliding_window")));
  TESSERA_RETURN_IF_ERROR(LayerPattern(m, g4, out, c));

  const io::GgufTensor* embd = m.file().Find("token_embd.weight");
  if (embd == nullptr) return InvalidArgument("GGUF '" + m.file().path() + "': tensor token_embd.weight is missing");
  if (embd->shape.size() != 2)
    return InvalidArgument("GGUF '" + m.file().path() + "': tensor token_embd.weight has " +
                           std::to_string(embd->shape.size()) + " dimensions, expected 2");
  c->vocab = embd->shape[0];
  std::optional<int64_t> vocab_key;
  TESSERA_RETURN_IF_ERROR(Assign(&vocab_key, m.OptInt("vocab_size")));
  if (vocab_key && *vocab_key != c->vocab)
    return m.Bad("vocab_size", "= " + std::to_string(*vocab_key) + " but token_embd.weight has " +
                                   std::to_string(c->vocab) + " rows");
  return Status::Ok();
}

// What the engine does not run: MoE outside Gemma 4, non-causal attention, fused QKV, RoPE scaling
// other than linear.
Status CheckRefused(const Meta& m, bool g4) {
  std::optional<int64_t> experts;
  TESSERA_RETURN_IF_ERROR(Assign(&experts, m.OptInt("expert_count")));
  if (experts && *experts > 0 && !g4)
    return m.Refused(m.Key("expert_count") + " = " + std::to_string(*experts) +
                     ": Mixture-of-Experts layers are supported for Gemma 4 only");
  if (m.Has("attention.causal")) {
    StatusOr<bool> causal = m.file().GetBool(m.Key("attention.causal"));
    if (!causal.ok()) return causal.status();
    if (!causal.value()) return m.Refused(m.Key("attention.causal") + " = false is not supported");
  }
  for (const io::GgufTensor& t : m.file().tensors())
    if (t.name.find(".attn_qkv.") != std::string::npos)
      return m.Refused("tensor " + t.name + ": fused QKV projections are not supported");
  if (m.Has("rope.scaling.type")) {
    StatusOr<std::string> type = m.file().GetString(m.Key("rope.scaling.type"));
    if (!type.ok()) return type.status();
    if (type.value() != "none" && type.value() != "linear")
      return m.Refused(m.Key("rope.scaling.type") + " = \"" + type.value().substr(0, 40) +
                       "\" is not supported (none, linear)");
  }
  return Status::Ok();
}

// The linear RoPE factor of the full-attention layers (llama.cpp reads rope.scaling.factor, then
// the older rope.scale_linear; 0 or absent means none).
StatusOr<double> RopeFactor(const Meta& m) {
  std::optional<double> f;
  TESSERA_RETURN_IF_ERROR(Assign(&f, m.OptFloat("rope.scaling.factor")));
  if (!f) TESSERA_RETURN_IF_ERROR(Assign(&f, m.OptFloat("rope.scale_linear")));
  if (m.Has("rope.scaling.type")) {
    StatusOr<std::string> type = m.file().GetString(m.Key("rope.scaling.type"));
    if (type.ok() && type.value() == "none") return 1.0;
  }
  return f && *f != 0.0 ? *f : 1.0;
}

// Gemma 4's full layers: how many leading pairs rope_freqs leaves rotated (factor 1; the rest carry
// the converter's huge factor). Absent: all of them.
StatusOr<int64_t> RotatedPairs(const Meta& m, int64_t head_dim, GgufModelConfig* out) {
  const io::GgufFile& f = m.file();
  const io::GgufTensor* t = f.Find("rope_freqs.weight");
  const int64_t half = head_dim / 2;
  if (t == nullptr) {
    out->inferred.push_back("rope_freqs.weight absent: full layers rotate every pair");
    return half;
  }
  const std::string where = "GGUF '" + f.path() + "': tensor rope_freqs.weight ";
  if (t->shape != std::vector<int64_t>{half} || t->quant != QuantType::kNone)
    return InvalidArgument(where + "must be " + std::to_string(half) + " float values (half the full layers' key_length)");
  std::vector<float> v(static_cast<size_t>(half));
  DecodeToF32(t->dtype, t->data, v.data(), half);
  int64_t rotated = 0;
  while (rotated < half && v[rotated] == 1.0f) ++rotated;
  for (int64_t i = rotated; i < half; ++i)
    if (!(v[i] >= kUnrotatedFactor))
      return Unimplemented(where + "entry " + std::to_string(i) + " = " + std::to_string(v[i]) +
                           ": only factors 1 (rotated) followed by >= 1e20 (unrotated) are supported");
  return rotated;
}

Json RopeEntry(const char* type, double theta) { return Json{{"rope_type", type}, {"rope_theta", theta}}; }

// Gemma 3: one head geometry; the converter stores norms as 1 + w and drops query_pre_attn_scalar.
Status Gemma3Fields(const Meta& m, const Common& c, Json& j, GgufModelConfig* out) {
  for (int64_t i = 1; i < c.layers; ++i) {
    if (c.kv_heads[i] != c.kv_heads[0])
      return m.Refused(m.Key("attention.head_count_kv") + ": per-layer KV head counts are a Gemma 4 feature");
    if (c.ff[i] != c.ff[0])
      return m.Refused(m.Key("feed_forward_length") + ": per-layer widths are not supported for Gemma 3");
  }
  j["num_key_value_heads"] = c.kv_heads[0];
  j["intermediate_size"] = c.ff[0];
  j["head_dim"] = c.head_dim;
  std::optional<int64_t> rot;
  TESSERA_RETURN_IF_ERROR(Assign(&rot, m.OptInt("rope.dimension_count")));
  if (rot && *rot != c.head_dim)
    return m.Refused(m.Key("rope.dimension_count") + " = " + std::to_string(*rot) + ": partial rotation is not supported for Gemma 3");
  if (m.file().Find("rope_freqs.weight") != nullptr)
    return m.Refused("tensor rope_freqs.weight: RoPE frequency factors are not supported for Gemma 3");
  std::optional<double> base, base_swa, attn_cap;
  TESSERA_RETURN_IF_ERROR(Assign(&base, m.OptFloat("rope.freq_base")));
  TESSERA_RETURN_IF_ERROR(Assign(&base_swa, m.OptFloat("rope.freq_base_swa")));
  double factor = 1.0;
  TESSERA_RETURN_IF_ERROR(Assign(&factor, RopeFactor(m)));
  Json full = RopeEntry(factor != 1.0 ? "linear" : "default", base.value_or(10000.0));
  if (factor != 1.0) full["factor"] = factor;
  j["rope_parameters"] = {{"full_attention", full}, {"sliding_attention", RopeEntry("default", base_swa.value_or(10000.0))}};
  TESSERA_RETURN_IF_ERROR(Assign(&attn_cap, m.OptFloat("attn_logit_softcapping")));
  if (attn_cap && *attn_cap != 0.0) j["attn_logit_softcapping"] = *attn_cap;
  if (!m.Has("attention.scale")) {
    // llama.cpp's rule (gemma_pytorch's config): the 27B (62 layers) scales by hidden / heads.
    const int64_t qpas = c.layers == 62 ? c.hidden / c.heads : c.head_dim;
    j["query_pre_attn_scalar"] = qpas;
    out->inferred.push_back("query_pre_attn_scalar = " + std::to_string(qpas) + " (not in the file; " +
                            (c.layers == 62 ? "hidden / heads at 62 layers" : "head_dim") + ", as llama.cpp assumes)");
  }
  out->norm_weights_shifted = true;
  return Status::Ok();
}

// Gemma 4 RoPE: default on sliding layers, proportional on full ones (rotated pairs from
// rope_freqs); both rotate their whole head as far as the dimension counts say.
Status Gemma4Rope(const Meta& m, int64_t full_hd, int64_t swa_hd, Json& j, GgufModelConfig* out) {
  std::optional<int64_t> rot, rot_swa;
  TESSERA_RETURN_IF_ERROR(Assign(&rot, m.OptInt("rope.dimension_count")));
  TESSERA_RETURN_IF_ERROR(Assign(&rot_swa, m.OptInt("rope.dimension_count_swa")));
  if (rot && *rot != full_hd)
    return m.Refused(m.Key("rope.dimension_count") + " = " + std::to_string(*rot) +
                     " differs from key_length (Gemma 4 marks unrotated pairs in rope_freqs instead)");
  if (rot_swa && *rot_swa != swa_hd)
    return m.Refused(m.Key("rope.dimension_count_swa") + " = " + std::to_string(*rot_swa) +
                     ": partial rotation on sliding layers is not supported");
  int64_t pairs = 0;
  TESSERA_RETURN_IF_ERROR(Assign(&pairs, RotatedPairs(m, full_hd, out)));
  // partial_rotary_factor p such that floor(p * D / 2) = pairs, as transformers counts them.
  const double p = pairs * 2 == full_hd ? 1.0 : (2.0 * pairs + 1.0) / static_cast<double>(full_hd);
  std::optional<double> base, base_swa, scale;
  TESSERA_RETURN_IF_ERROR(Assign(&base, m.OptFloat("rope.freq_base")));
  TESSERA_RETURN_IF_ERROR(Assign(&base_swa, m.OptFloat("rope.freq_base_swa")));
  double factor = 1.0;
  TESSERA_RETURN_IF_ERROR(Assign(&factor, RopeFactor(m)));
  Json full = RopeEntry("proportional", base.value_or(10000.0));
  full["partial_rotary_factor"] = p;
  full["factor"] = factor;
  j["rope_parameters"] = {{"full_attention", full}, {"sliding_attention", RopeEntry("default", base_swa.value_or(10000.0))}};
  TESSERA_RETURN_IF_ERROR(Assign(&scale, m.OptFloat("attention.scale")));
  if (scale && *scale != 1.0)
    return m.Refused(m.Key("attention.scale") + " = " + std::to_string(*scale) + ": Gemma 4 attends with scale 1");
  return Status::Ok();
}

// Gemma 4's MoE block (docs/moe.md): expert_count > 0 turns it on in every layer; the experts used
// per token and their width are then required (llama.cpp cannot size the expert tensors without them).
Status Gemma4Experts(const Meta& m, Json& j) {
  std::optional<int64_t> experts;
  TESSERA_RETURN_IF_ERROR(Assign(&experts, m.OptInt("expert_count")));
  if (!experts || *experts == 0) return Status::Ok();
  if (*experts < 0) return m.Bad("expert_count", "= " + std::to_string(*experts) + " must be >= 0");
  for (const char* key : {"expert_used_count", "expert_feed_forward_length"})
    if (!m.Has(key)) return m.Bad(key, "is missing (required with expert_count = " + std::to_string(*experts) + ")");
  int64_t used = 0, width = 0;
  TESSERA_RETURN_IF_ERROR(Assign(&used, m.Int("expert_used_count")));
  TESSERA_RETURN_IF_ERROR(Assign(&width, m.Int("expert_feed_forward_length")));
  // Ranges are the config parser's (its messages name these keys through FieldKeys).
  j["enable_moe_block"] = true;
  j["num_experts"] = *experts;
  j["top_k_experts"] = used;
  j["moe_intermediate_size"] = width;
  return Status::Ok();
}

// Gemma 4: per-layer head geometry (sliding vs full), KV sharing, the double-wide MLP, PLE, and
// V = K on full layers stored without attn_v (attention_k_eq_v).
Status Gemma4Fields(const Meta& m, const Common& c, Json& j, GgufModelConfig* out) {
  const io::GgufFile& f = m.file();
  std::optional<int64_t> swa_kl, swa_vl, shared;
  TESSERA_RETURN_IF_ERROR(Assign(&swa_kl, m.OptInt("attention.key_length_swa")));
  TESSERA_RETURN_IF_ERROR(Assign(&swa_vl, m.OptInt("attention.value_length_swa")));
  const int64_t swa_hd = swa_kl.value_or(c.head_dim);
  if (swa_vl.value_or(swa_hd) != swa_hd)
    return m.Refused(m.Key("attention.value_length_swa") + " differs from key_length_swa");
  TESSERA_RETURN_IF_ERROR(Assign(&shared, m.OptInt("attention.shared_kv_layers")));
  const int64_t S = shared.value_or(0);
  if (S < 0 || S >= c.layers) return m.Bad("attention.shared_kv_layers", "= " + std::to_string(S) + " is out of range");
  j["num_kv_shared_layers"] = S;
  // Widths: equal everywhere, or doubled on exactly the KV-shared layers (use_double_wide_mlp).
  bool equal = true, doubled = S > 0;
  for (int64_t i = 0; i < c.layers; ++i) {
    equal = equal && c.ff[i] == c.ff[0];
    doubled = doubled && c.ff[i] == (i >= c.layers - S ? 2 * c.ff[0] : c.ff[0]);
  }
  if (!equal && !doubled)
    return m.Refused(m.Key("feed_forward_length") +
                     ": per-layer widths other than doubled KV-shared layers (use_double_wide_mlp) are not supported");
  j["intermediate_size"] = c.ff[0];
  j["use_double_wide_mlp"] = !equal;
  Json plc = Json::object();
  int64_t swa_kv = -1;
  bool any_k_eq_v = false, any_v = false;
  for (int64_t i = 0; i < c.layers; ++i) {
    plc[std::to_string(i)] = {{"head_dim", c.sliding[i] ? swa_hd : c.head_dim}, {"num_key_value_heads", c.kv_heads[i]}};
    if (c.sliding[i] && swa_kv < 0) swa_kv = c.kv_heads[i];
    if (c.sliding[i] || i >= c.layers - S) continue;
    const std::string p = "blk." + std::to_string(i) + ".";
    const bool has_v = f.Find(p + "attn_v.weight") != nullptr;
    (has_v ? any_v : any_k_eq_v) = true;
    if (any_v && any_k_eq_v)
      return m.Refused("tensor " + p + "attn_v.weight: some full layers have a V projection and others not");
  }
  j["head_dim"] = swa_hd;
  j["num_key_value_heads"] = swa_kv > 0 ? swa_kv : c.kv_heads[0];
  j["per_layer_config"] = plc;
  j["attention_k_eq_v"] = any_k_eq_v;
  TESSERA_RETURN_IF_ERROR(Gemma4Experts(m, j));

  TESSERA_RETURN_IF_ERROR(Gemma4Rope(m, c.head_dim, swa_hd, j, out));
  int64_t ple = 0;
  TESSERA_RETURN_IF_ERROR(Assign(&ple, m.Int("embedding_length_per_layer_input")));
  j["hidden_size_per_layer_input"] = ple;
  if (ple > 0) {
    const io::GgufTensor* t = f.Find("per_layer_token_embd.weight");
    if (t == nullptr || t->shape.size() != 2)
      return InvalidArgument("GGUF '" + f.path() + "': " + m.Key("embedding_length_per_layer_input") + " = " +
                             std::to_string(ple) + " but tensor per_layer_token_embd.weight is " +
                             (t == nullptr ? "missing" : "not a matrix"));
    j["vocab_size_per_layer_input"] = t->shape[0];
  }
  return Status::Ok();
}

// The token ids (tokenizer.ggml.*): bos, eos (and end-of-turn, which also ends generation), pad.
Status TokenIds(const io::GgufFile& f, Json& j) {
  auto opt = [&](const char* key, std::optional<int64_t>* out) -> Status {
    if (!f.Has(key)) return Status::Ok();
    StatusOr<int64_t> v = f.GetInt(key);
    if (!v.ok()) return v.status();
    *out = v.value();
    return Status::Ok();
  };
  std::optional<int64_t> bos, eos, eot, pad;
  TESSERA_RETURN_IF_ERROR(opt("tokenizer.ggml.bos_token_id", &bos));
  TESSERA_RETURN_IF_ERROR(opt("tokenizer.ggml.eos_token_id", &eos));
  TESSERA_RETURN_IF_ERROR(opt("tokenizer.ggml.eot_token_id", &eot));
  TESSERA_RETURN_IF_ERROR(opt("tokenizer.ggml.padding_token_id", &pad));
  if (bos) j["bos_token_id"] = *bos;
  if (pad) j["pad_token_id"] = *pad;
  Json ids = Json::array();
  if (eos) ids.push_back(*eos);
  if (eot && eot != eos) ids.push_back(*eot);
  if (!ids.empty()) j["eos_token_id"] = ids;
  return Status::Ok();
}

// HF config field -> the GGUF key it came from (for messages of ParseModelConfig); longer field
// names first, so that at one position the longer name wins.
std::vector<std::pair<std::string, std::string>> FieldKeys(const std::string& a) {
  return {{"vocab_size_per_layer_input", "per_layer_token_embd.weight"},
          {"hidden_size_per_layer_input", a + ".embedding_length_per_layer_input"},
          {"max_position_embeddings", a + ".context_length"},
          {"final_logit_softcapping", a + ".final_logit_softcapping"},
          {"attn_logit_softcapping", a + ".attn_logit_softcapping"},
          {"num_kv_shared_layers", a + ".attention.shared_kv_layers"},
          {"num_attention_heads", a + ".attention.head_count"},
          {"num_key_value_heads", a + ".attention.head_count_kv"},
          {"num_hidden_layers", a + ".block_count"},
          {"intermediate_size", a + ".feed_forward_length"},
          {"moe_intermediate_size", a + ".expert_feed_forward_length"},
          {"top_k_experts", a + ".expert_used_count"},
          {"num_experts", a + ".expert_count"},
          {"enable_moe_block", a + ".expert_count"},
          {"per_layer_config", a + ".attention.key_length / head_count_kv"},
          {"rope_parameters", a + ".rope.*"},
          {"sliding_window", a + ".attention.sliding_window"},
          {"rms_norm_eps", a + ".attention.layer_norm_rms_epsilon"},
          {"hidden_size", a + ".embedding_length"},
          {"bos_token_id", "tokenizer.ggml.bos_token_id"},
          {"pad_token_id", "tokenizer.ggml.padding_token_id"},
          {"eos_token_id", "tokenizer.ggml.eos_token_id / eot_token_id"},
          {"vocab_size", "token_embd.weight"},
          {"head_dim", a + ".attention.key_length"}};
}

StatusOr<GgufModelConfig> Translate(const io::GgufFile& f) {
  GgufModelConfig out;
  TESSERA_RETURN_IF_ERROR(Assign(&out.architecture, f.GetString("general.architecture")));
  const std::string& a = out.architecture;
  if (a == "clip")
    return Unimplemented("GGUF '" + f.path() + "': general.architecture = \"clip\" is a vision/audio projector "
                         "(mmproj) file; load the text model's GGUF (images need a safetensors checkpoint)");
  if (a != "gemma3" && a != "gemma4")
    return Unimplemented("GGUF '" + f.path() + "': general.architecture = \"" + a.substr(0, 60) +
                         "\" is not supported (gemma3, gemma4)");
  const bool g4 = a == "gemma4";
  const Meta m(f, a);
  TESSERA_RETURN_IF_ERROR(CheckRefused(m, g4));
  Common c;
  TESSERA_RETURN_IF_ERROR(ReadCommon(m, g4, &out, &c));
  Json j = Json::object();
  j["model_type"] = g4 ? "gemma4_text" : "gemma3_text";
  j["vocab_size"] = c.vocab;
  j["hidden_size"] = c.hidden;
  j["num_hidden_layers"] = c.layers;
  j["num_attention_heads"] = c.heads;
  Json types = Json::array();
  for (bool s : c.sliding) types.push_back(s ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  j["sliding_window"] = c.window ? Json(*c.window) : Json(nullptr);
  double eps = 0;
  TESSERA_RETURN_IF_ERROR(Assign(&eps, f.GetFloat(m.Key("attention.layer_norm_rms_epsilon"))));
  j["rms_norm_eps"] = eps;
  int64_t ctx = 0;
  TESSERA_RETURN_IF_ERROR(Assign(&ctx, m.Int("context_length")));
  j["max_position_embeddings"] = ctx;
  std::optional<double> cap;
  TESSERA_RETURN_IF_ERROR(Assign(&cap, m.OptFloat("final_logit_softcapping")));
  if (cap && *cap != 0.0) j["final_logit_softcapping"] = *cap;
  j["tie_word_embeddings"] = f.Find("output.weight") == nullptr;
  TESSERA_RETURN_IF_ERROR(TokenIds(f, j));
  TESSERA_RETURN_IF_ERROR(g4 ? Gemma4Fields(m, c, j, &out) : Gemma3Fields(m, c, j, &out));

  StatusOr<ModelConfig> parsed = ParseModelConfig(j.dump());
  if (!parsed.ok()) {
    // The field the message names first is the one at fault (longest match at that position).
    std::string msg = parsed.status().message();
    size_t best = std::string::npos;
    std::string from;
    for (const auto& [field, key] : FieldKeys(a)) {
      const size_t at = msg.find(field);
      if (at != std::string::npos && (best == std::string::npos || at < best)) best = at, from = key;
    }
    if (!from.empty()) msg += " (from " + from + ")";
    return Status(parsed.status().code(), "GGUF '" + f.path() + "': " + msg);
  }
  out.config = std::move(parsed.value());
  if (!g4 && m.Has("attention.scale")) {
    double scale = 0;
    TESSERA_RETURN_IF_ERROR(Assign(&scale, f.GetFloat(m.Key("attention.scale"))));
    if (!(scale > 0.0) || !std::isfinite(scale)) return m.Bad("attention.scale", "= " + std::to_string(scale) + " must be > 0");
    out.config.attention_scale = scale;
    out.config.query_pre_attn_scalar = 1.0 / (scale * scale);
  }
  return out;
}

}  // namespace

StatusOr<GgufModelConfig> GgufToModelConfig(const io::GgufFile& file) {
  try {
    return Translate(file);
  } catch (const std::exception& e) {  // nlohmann never throws on what Translate builds; never cross the API
    return InvalidArgument("GGUF '" + file.path() + "': " + e.what());
  }
}

bool IsGgufFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char magic[4] = {};
  const size_t n = std::fread(magic, 1, 4, f);
  std::fclose(f);
  return n == 4 && magic[0] == 'G' && magic[1] == 'G' && magic[2] == 'U' && magic[3] == 'F';
}

}  // namespace tessera::model
