#include "runtime/quantize_vocab.h"

#include <map>
#include <set>

#include "io/json_nesting.h"

namespace tessera {
namespace {

using nlohmann::json;
using tokenizer::TokenizerVocab;

bool IsHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// "<0xAB>": a byte-fallback piece.
bool IsBytePiece(const std::string& p) {
  return p.size() == 6 && p.compare(0, 3, "<0x") == 0 && IsHex(p[3]) && IsHex(p[4]) && p[5] == '>';
}

bool IsTrue(const json& o, const char* key) { return o.contains(key) && o[key].is_boolean() && o[key].get<bool>(); }

// tokenizer.json -> the 'gemma4' vocabulary: pieces by id, merges by rank, kinds from the added
// tokens (special: control; others: user-defined), byte pieces, and the tokens the converter keeps
// visible; every score -1000, as the converter writes.
Status HfBpeVocab(const json& tj, const std::string& where, TokenizerVocab* v) {
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
      (IsTrue(a, "special") ? special : user).insert(id);
    }
  }
  const int64_t n = by_id.empty() ? 0 : by_id.rbegin()->first + 1;
  if (static_cast<int64_t>(by_id.size()) != n) return InvalidArgument(where + ": the token ids are not 0..n-1");
  static const std::set<std::string> kVisible = {"<|channel>",       "<channel|>",       "<|tool_call>", "<tool_call|>",
                                                 "<|tool_response>", "<tool_response|>", "<|\"|>"};
  v->model = "gemma4";
  for (const auto& [id, piece] : by_id) {
    v->tokens.push_back(piece);
    v->scores.push_back(-1000.0f);
    int32_t t = IsBytePiece(piece)  ? TokenizerVocab::kByte
                : special.count(id) ? TokenizerVocab::kControl
                : user.count(id)    ? TokenizerVocab::kUserDefined
                                    : TokenizerVocab::kNormal;
    if (kVisible.count(piece)) t = TokenizerVocab::kUserDefined;
    v->token_types.push_back(t);
  }
  if (tj["model"].contains("merges") && tj["model"]["merges"].is_array()) {
    for (const json& m : tj["model"]["merges"]) {
      if (m.is_string())
        v->merges.push_back(m.get<std::string>());
      else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        v->merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      else
        return InvalidArgument(where + ": a model.merges entry is neither \"a b\" nor [a, b]");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<TokenizerVocab> GgufVocabFromTokenizerJson(const json& tj, const std::string& where) {
  if (!tj.is_object()) return InvalidArgument(where + ": not a JSON object");
  TokenizerVocab v;
  TESSERA_RETURN_IF_ERROR(HfBpeVocab(tj, where, &v));
  return v;
}

StatusOr<TokenizerVocab> GgufVocabFromTokenizerJsonText(std::string_view text, const std::string& where) {
  TESSERA_RETURN_IF_ERROR(io::CheckJsonNesting(text, where));
  const json tj = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (tj.is_discarded()) return InvalidArgument(where + ": not valid JSON");
  return GgufVocabFromTokenizerJson(tj, where);
}

}  // namespace tessera
