#include "runtime/quantize_model_meta.h"

#include <sentencepiece_processor.h>
#include <sys/stat.h>

#include <set>
#include <vector>

#include "io/input_file.h"
#include "io/json_nesting.h"
#include "runtime/quantize_vocab.h"
#include "tessera/tokenizer_vocab.h"

namespace tessera {
namespace {

using nlohmann::json;
using tokenizer::TokenizerVocab;
constexpr uint64_t kMaxTokenizerBytes = 512ull << 20;

bool IsFile(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A JSON file of the checkpoint, or an empty object when absent.
StatusOr<json> ReadJson(const std::string& path, bool required) {
  if (!IsFile(path)) {
    if (required) return InvalidArgument("quantize: '" + path + "' is missing");
    return json::object();
  }
  StatusOr<std::string> text = io::ReadInputFile(path, "tokenizer", kMaxTokenizerBytes);
  if (!text.ok()) return Status(text.status().code(), "quantize: " + text.status().message());
  TESSERA_RETURN_IF_ERROR(io::CheckJsonNesting(text.value(), path));
  json j = json::parse(text.value(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("quantize: '" + path + "' is not a JSON object");
  return j;
}

// tokenizer.model -> the 'llama' vocabulary, as the converter builds it: the SentencePiece pieces
// with their scores and kinds, padded to vocab_size, added tokens of tokenizer_config.json applied.
Status SentencePieceVocab(const std::string& dir, int64_t vocab_size, const json& tok_config, TokenizerVocab* v) {
  sentencepiece::SentencePieceProcessor sp;
  const auto st = sp.Load(dir + "/tokenizer.model");
  if (!st.ok()) return InvalidArgument("quantize: '" + dir + "/tokenizer.model': " + std::string(st.message()));
  const int64_t n = vocab_size > 0 ? vocab_size : sp.GetPieceSize();
  v->model = "llama";
  v->pre = "default";
  v->tokens.resize(n);
  v->scores.assign(n, -10000.0f);
  v->token_types.assign(n, TokenizerVocab::kUnused);
  for (int64_t i = 0; i < n; ++i) v->tokens[i] = "[PAD" + std::to_string(i) + "]";
  for (int id = 0; id < sp.GetPieceSize() && id < n; ++id) {
    v->tokens[id] = sp.IdToPiece(id);
    v->scores[id] = sp.GetScore(id);
    v->token_types[id] = sp.IsUnknown(id)   ? TokenizerVocab::kUnknown
                         : sp.IsControl(id) ? TokenizerVocab::kControl
                         : sp.IsUnused(id)  ? TokenizerVocab::kUnused
                         : sp.IsByte(id)    ? TokenizerVocab::kByte
                                            : TokenizerVocab::kNormal;
  }
  const json* added = tok_config.contains("added_tokens_decoder") ? &tok_config["added_tokens_decoder"] : nullptr;
  if (added != nullptr && added->is_object()) {
    for (const auto& [key, data] : added->items()) {
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (end == key.c_str() || *end != '\0' || id < 0 || id >= n || !data.is_object() || !data.contains("content") ||
          !data["content"].is_string())
        continue;
      std::string text = data["content"].get<std::string>();
      const bool special = (data.contains("special") && data["special"].is_boolean() && data["special"].get<bool>()) ||
                           (text.size() >= 2 && ((text.front() == '<' && text.back() == '>') ||
                                                 (text.front() == '[' && text.back() == ']')));
      if (!special) {
        // user-defined pieces are stored with plain spaces, as the converter pre-normalizes them
        for (size_t p; (p = text.find("\xe2\x96\x81")) != std::string::npos;) text.replace(p, 3, " ");
      }
      v->tokens[id] = text;
      v->scores[id] = -1000.0f;
      v->token_types[id] = special ? TokenizerVocab::kControl : TokenizerVocab::kUserDefined;
    }
  }
  return Status::Ok();
}

// The converter's special token ids: tokenizer_config.json's <kind>_token looked up among the
// added tokens (or the pieces), else config.json's <kind>_token_id.
void SpecialIds(const json& tok_config, const json& tj, const json& config, const TokenizerVocab& v,
                io::GgufWriter* w) {
  for (const char* kind : {"bos", "eos", "unk", "sep", "pad", "cls", "mask"}) {
    int64_t id = -1;
    const std::string key = std::string(kind) + "_token";
    if (tok_config.contains(key)) {
      const json& e = tok_config[key];
      std::string content = e.is_string() ? e.get<std::string>()
                            : (e.is_object() && e.contains("content") && e["content"].is_string())
                                ? e["content"].get<std::string>()
                                : "";
      if (!content.empty() && tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
        for (const json& a : tj["added_tokens"])
          if (a.is_object() && a.contains("content") && a["content"] == content && a.contains("id") &&
              a["id"].is_number_integer())
            id = a["id"].get<int64_t>();
      }
      for (size_t i = 0; id < 0 && !content.empty() && i < v.tokens.size(); ++i)
        if (v.tokens[i] == content) id = static_cast<int64_t>(i);
    }
    if (id < 0 && config.contains(key + "_id") && config[key + "_id"].is_number_integer())
      id = config[key + "_id"].get<int64_t>();
    if (id >= 0 && id < static_cast<int64_t>(v.tokens.size()))
      w->SetU32(std::string("tokenizer.ggml.") +
                    (std::string(kind) == "unk"   ? "unknown"
                     : kind == std::string("pad") ? "padding"
                                                  : kind) +
                    "_token_id",
                static_cast<uint32_t>(id));
  }
}

Status WriteVocab(const std::string& dir, int64_t vocab_size, bool gemma4, const json& config, io::GgufWriter* w,
                  int64_t* n_tokens) {
  StatusOr<json> tok_config = ReadJson(dir + "/tokenizer_config.json", false);
  if (!tok_config.ok()) return tok_config.status();
  const bool has_sp = IsFile(dir + "/tokenizer.model"), has_json = IsFile(dir + "/tokenizer.json");
  json tj = json::object();
  if (has_json) {
    StatusOr<json> r = ReadJson(dir + "/tokenizer.json", true);
    if (!r.ok()) return r.status();
    tj = std::move(r.value());
  }
  TokenizerVocab v;
  if (gemma4) {
    if (!has_json)
      return InvalidArgument("quantize: '" + dir +
                             "' has no tokenizer.json (a Gemma 4 GGUF carries its BPE vocabulary)");
    StatusOr<TokenizerVocab> bpe = GgufVocabFromTokenizerJson(tj, "quantize: '" + dir + "/tokenizer.json'");
    if (!bpe.ok()) return bpe.status();
    v = std::move(bpe.value());
  } else {
    if (!has_sp)
      return InvalidArgument("quantize: '" + dir +
                             "' has no tokenizer.model (a Gemma 3 GGUF carries its SentencePiece vocabulary)");
    TESSERA_RETURN_IF_ERROR(SentencePieceVocab(dir, vocab_size, tok_config.value(), &v));
  }
  w->SetString("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) w->SetString("tokenizer.ggml.pre", v.pre);
  w->SetStringArray("tokenizer.ggml.tokens", v.tokens);
  w->SetF32Array("tokenizer.ggml.scores", v.scores);
  w->SetI32Array("tokenizer.ggml.token_type", v.token_types);
  if (!v.merges.empty()) w->SetStringArray("tokenizer.ggml.merges", v.merges);
  SpecialIds(tok_config.value(), tj, config, v, w);
  for (const char* kind : {"bos", "eos"}) {
    const std::string key = std::string("add_") + kind + "_token";
    if (tok_config.value().contains(key) && tok_config.value()[key].is_boolean())
      w->SetBool("tokenizer.ggml." + key, tok_config.value()[key].get<bool>());
  }
  if (tok_config.value().contains("chat_template") && tok_config.value()["chat_template"].is_string())
    w->SetString("tokenizer.chat_template", tok_config.value()["chat_template"].get<std::string>());
  w->SetBool("tokenizer.ggml.add_space_prefix", false);
  if (gemma4) w->SetBool("tokenizer.ggml.add_bos_token", true);
  *n_tokens = static_cast<int64_t>(v.tokens.size());
  return Status::Ok();
}

// The converter's Gemma 4 full-layer head width and KV heads: global_* or the per_layer_config.
int64_t FullLayerValue(const json& tc, const char* global_key, const char* layer_key) {
  if (tc.contains(global_key) && tc[global_key].is_number_integer()) return tc[global_key].get<int64_t>();
  if (tc.contains("per_layer_config") && tc["per_layer_config"].is_object() && tc.contains("layer_types") &&
      tc["layer_types"].is_array()) {
    const json& types = tc["layer_types"];
    for (const auto& [k, lc] : tc["per_layer_config"].items()) {
      const size_t i = std::strtoul(k.c_str(), nullptr, 10);
      if (i < types.size() && types[i] == "full_attention" && lc.is_object() && lc.contains(layer_key) &&
          lc[layer_key].is_number_integer())
        return lc[layer_key].get<int64_t>();
    }
  }
  return -1;
}

void WriteArch(const model::ModelConfig& c, const json& tc, io::GgufWriter* w) {
  const std::string a = c.is_gemma4() ? "gemma4" : "gemma3";
  const auto u32 = [](int64_t x) { return static_cast<uint32_t>(x); };
  w->SetU32(a + ".block_count", u32(c.num_hidden_layers));
  w->SetU32(a + ".context_length", u32(c.max_position_embeddings));
  w->SetU32(a + ".embedding_length", u32(c.hidden_size));
  w->SetU32(a + ".feed_forward_length", u32(c.intermediate_size));
  w->SetU32(a + ".attention.head_count", u32(c.num_attention_heads));
  w->SetU32(a + ".attention.head_count_kv", u32(c.num_key_value_heads));
  if (c.rope_full.type == model::RopeType::kLinear) {
    w->SetString(a + ".rope.scaling.type", "linear");
    w->SetF32(a + ".rope.scaling.factor", static_cast<float>(c.rope_full.factor));
  }
  w->SetF32(a + ".rope.freq_base", static_cast<float>(c.rope_full.theta));
  w->SetF32(a + ".rope.freq_base_swa", static_cast<float>(c.rope_sliding.theta));
  w->SetF32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  w->SetU32(a + ".attention.key_length", u32(c.head_dim));
  w->SetU32(a + ".attention.value_length", u32(c.head_dim));
  if (c.final_logit_softcapping && *c.final_logit_softcapping != 0)
    w->SetF32(a + ".final_logit_softcapping", static_cast<float>(*c.final_logit_softcapping));
  if (!(tc.contains("sliding_window_pattern") && tc["sliding_window_pattern"] == 1))
    w->SetU32(a + ".attention.sliding_window", u32(c.sliding_window));
  if (!c.is_gemma4()) return;
  w->SetU32(a + ".attention.shared_kv_layers", u32(c.num_kv_shared_layers));
  w->SetU32(a + ".embedding_length_per_layer_input", u32(c.hidden_size_per_layer_input));
  std::vector<bool> swa;
  for (kv::LayerKind k : c.layer_types) swa.push_back(k == kv::LayerKind::kSliding);
  w->SetBoolArray(a + ".attention.sliding_window_pattern", swa);
  int64_t hd_full = FullLayerValue(tc, "global_head_dim", "head_dim");
  if (hd_full < 0) hd_full = c.head_dim;
  w->SetU32(a + ".attention.key_length", u32(hd_full));
  w->SetU32(a + ".attention.value_length", u32(hd_full));
  w->SetU32(a + ".attention.key_length_swa", u32(c.head_dim));
  w->SetU32(a + ".attention.value_length_swa", u32(c.head_dim));
  if (c.use_double_wide_mlp) {
    std::vector<int32_t> ff;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      ff.push_back(static_cast<int32_t>(i < c.num_hidden_layers - c.num_kv_shared_layers ? c.intermediate_size
                                                                                         : 2 * c.intermediate_size));
    w->SetI32Array(a + ".feed_forward_length", ff);
  }
  const int64_t kv_full = FullLayerValue(tc, "num_global_key_value_heads", "num_key_value_heads");
  if (kv_full >= 0) {
    std::vector<int32_t> kv;
    for (bool s : swa) kv.push_back(static_cast<int32_t>(s ? c.num_key_value_heads : kv_full));
    w->SetI32Array(a + ".attention.head_count_kv", kv);
  }
  w->SetU32(a + ".rope.dimension_count", u32(hd_full));
  w->SetU32(a + ".rope.dimension_count_swa", u32(c.head_dim));
  if (!c.has_moe()) return;
  w->SetU32(a + ".expert_count", u32(c.num_experts));
  w->SetU32(a + ".expert_used_count", u32(c.top_k_experts));
  w->SetU32(a + ".expert_feed_forward_length", u32(c.moe_intermediate_size));
}

}  // namespace

Status WriteQuantizeMetadata(const std::string& dir, const model::ModelConfig& cfg, const json& text_config,
                             QuantizeFileType type, io::GgufWriter* w, int64_t* n_tokens) {
  StatusOr<json> config = ReadJson(dir + "/config.json", true);
  if (!config.ok()) return config.status();
  w->SetString("general.architecture", cfg.is_gemma4() ? "gemma4" : "gemma3");
  w->SetString("general.type", "model");
  std::string name = dir;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  name = name.substr(name.find_last_of('/') + 1);
  w->SetString("general.name", name);
  WriteArch(cfg, text_config, w);
  w->SetU32("general.file_type", LlamaFtype(type));
  w->SetU32("general.quantization_version", 2);
  return WriteVocab(dir, cfg.vocab_size, cfg.is_gemma4(), config.value(), w, n_tokens);
}

}  // namespace tessera
