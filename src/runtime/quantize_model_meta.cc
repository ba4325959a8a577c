#include "runtime/quantize_model_meta.h"

#include <sys/stat.h>

#include <regex>
#include <set>
#include <vector>

#include <sentencepiece_processor.h>

#include "io/input_file.h"
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
      if (end == key.c_str() || *end != '\0' || id < 0 || id >= n || !data.is_object() ||
          !data.contains("content") || !data["content"].is_string())
        continue;
      std::string text = data["content"].get<std::string>();
      const bool special = data.value("special", false) ||
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

// tokenizer.json -> the 'gemma4' vocabulary: pieces by id, merges by rank, kinds from the added
// tokens (special: control; others: user-defined), byte pieces, and the tokens the converter keeps
// visible; every score -1000, as the converter writes.
Status HfBpeVocab(const std::string& dir, const json& tj, TokenizerVocab* v) {
  const std::string where = "quantize: '" + dir + "/tokenizer.json'";
  if (!tj.contains("model") || !tj["model"].is_object() || !tj["model"].contains("vocab") ||
      !tj["model"]["vocab"].is_object())
    return InvalidArgument(where + ": model.vocab is missing or not an object");
  const json& vocab = tj["model"]["vocab"];
  std::map<int64_t, std::string> by_id;
  for (const auto& [piece, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 24))
      return InvalidArgument(where + ": model.vocab[\"" + piece.substr(0, 64) + "\"] is not a valid id");
    by_id[id.get<int64_t>()] = piece;
  }
  std::set<int64_t> special, user;
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
    for (const json& a : tj["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        return InvalidArgument(where + ": an added_tokens entry lacks an integer id or a string content");
      const int64_t id = a["id"].get<int64_t>();
      if (id < 0 || id >= (int64_t{1} << 24)) return InvalidArgument(where + ": added token id out of range");
      by_id[id] = a["content"].get<std::string>();
      (a.value("special", false) ? special : user).insert(id);
    }
  }
  const int64_t n = by_id.empty() ? 0 : by_id.rbegin()->first + 1;
  if (static_cast<int64_t>(by_id.size()) != n) return InvalidArgument(where + ": the token ids are not 0..n-1");
  static const std::set<std::string> kVisible = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>",
                                                 "<|tool_response>", "<tool_response|>", "<|\"|>"};
  static const std::regex kByte("<0x[0-9A-Fa-f]{2}>");
  v->model = "gemma4";
  for (const auto& [id, piece] : by_id) {
    v->tokens.push_back(piece);
    v->scores.push_back(-1000.0f);
    int32_t t = std::regex_match(piece, kByte) ? TokenizerVocab::kByte
                : special.count(id)            ? TokenizerVocab::kControl
                : user.count(id)               ? TokenizerVocab::kUserDefined
                                               : TokenizerVocab::kNormal;
    if (kVisible.count(piece)) t = TokenizerVocab::kUserDefined;
    v->token_types.push_back(t);
  }
  if (tj["model"].contains("merges") && tj["model"]["merges"].is_array()) {
    for (const json& m : tj["model"]["merges"]) {
      if (m.is_string()) v->merges.push_back(m.get<std::string>());
      else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        v->merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      else return InvalidArgument(where + ": a model.merges entry is neither \"a b\" nor [a, b]");
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
          if (a.is_object() && a.value("content", "") == content && a.contains("id") && a["id"].is_number_integer())
            id = a["id"].get<int64_t>();
      }
      for (size_t i = 0; id < 0 && !content.empty() && i < v.tokens.size(); ++i)
        if (v.tokens[i] == content) id = static_cast<int64_t>(i);
    }
    if (id < 0 && config.contains(key + "_id") && config[key + "_id"].is_number_integer())
      id = config[key + "_id"].get<int64_t>();
    if (id >= 0 && id < static_cast<int64_t>(v.tokens.size()))
      w->SetU32(std::string("tokenizer.ggml.") + (std::string(kind) == "unk" ? "unknown" : kind == std::string("pad") ? "padding" : kind) +
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
    if (!has_json) return InvalidArgument("quantize: '" + dir + "' has no tokenizer.json (a Gemma 4 GGUF carries its BPE vocabulary)");
    TESSERA_RETURN_IF_ERROR(HfBpeVocab(dir, tj, &v));
  } else {
    if (!has_sp) return InvalidArgument("quantize: '" + dir + "' has no tokenizer.model (a Gemma 3 GGUF carries its SentencePiece vocabulary)");
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
  if (tc.contains("per_layer_config") && tc["per_layer_config"].is_object() && tc.contains("layer_types")) {
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
