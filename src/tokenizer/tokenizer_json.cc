#include "tokenizer/tokenizer_json.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "io/json_nesting.h"
#include "tokenizer/vocab_check.h"

namespace tessera::tokenizer {
namespace {

using Json = nlohmann::json;
constexpr size_t kMaxMerges = size_t{1} << 23;

// The fixed parts Gemma's files hold, as transformers writes them (GemmaConverter, GemmaTokenizer).
const Json& ReplaceSpaces() {
  static const Json j = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}};
  return j;
}
// Splits the normalized text at spaces; it holds none after ReplaceSpaces, so this is a no-op.
const Json& SplitAtSpaces() {
  static const Json j = {
      {"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}};
  return j;
}
const Json& ByteFallbackDecoder() {
  static const Json j = {{"type", "Sequence"},
                         {"decoders",
                          {{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}}, {"content", " "}},
                           {{"type", "ByteFallback"}},
                           {{"type", "Fuse"}}}}};
  return j;
}

Status Bad(const std::string& name, const std::string& what) {
  return InvalidArgument("tokenizer.json '" + name + "': " + what);
}

// A value for a message: its JSON text, cut short.
std::string Show(const Json& j) {
  std::string s = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  return s.size() > 160 ? s.substr(0, 160) + "..." : s;
}

Status CheckKeys(const Json& obj, std::initializer_list<std::string_view> known, const std::string& where,
                 const std::string& name) {
  if (!obj.is_object())
    return Bad(name, (where.empty() ? "the document" : where) + " is " + Show(obj) + ", not an object");
  for (const auto& [key, value] : obj.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end())
      return Bad(name, where + (where.empty() ? "" : ".") + Show(Json(key)) + " is not supported");
  }
  return Status::Ok();
}

// obj[key] must be null (or absent), or equal `want` when `want` is not null itself.
Status CheckFixed(const Json& obj, const char* key, const Json& want, bool may_be_null, const std::string& where,
                  const std::string& name) {
  const auto it = obj.find(key);
  const bool null = it == obj.end() || it->is_null();
  if (null && may_be_null) return Status::Ok();
  if (!null && *it == want) return Status::Ok();
  return Bad(name, where + key + " is " + (null ? std::string("null") : Show(*it)) +
                       "; supported: " + (may_be_null ? "null or " : "") + Show(want));
}

// A non-negative integer below `limit`, or -1.
int64_t IdValue(const Json& j, int64_t limit) {
  if (j.is_number_unsigned()) return j.get<uint64_t>() < static_cast<uint64_t>(limit) ? j.get<int64_t>() : -1;
  return -1;
}

// Why `t` cannot be a token, or nullptr.
const char* TokenProblem(const std::string& t) {
  if (t.empty()) return "is empty";
  if (t.size() > kMaxTokenBytes) return "is longer than the limit of 65536 bytes";
  if (t.find('\0') != std::string::npos) return "contains a NUL character";
  return nullptr;
}

// obj[key], or null when absent (a reference: the vocabulary and merges are large).
const Json& Member(const Json& obj, const char* key) {
  static const Json kNull;
  const auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

// model.vocab: token -> id, ids exactly 0..n-1.
Status ParseVocab(const Json& vocab, const std::string& name, TokenizerJson* out) {
  if (!vocab.is_object() || vocab.empty()) return Bad(name, "model.vocab is missing, empty or not an object");
  if (vocab.size() > kMaxVocabTokens)
    return Bad(name, "model.vocab has " + std::to_string(vocab.size()) + " tokens, more than " +
                         std::to_string(kMaxVocabTokens));
  const auto n = static_cast<int64_t>(vocab.size());
  std::vector<const std::string*> by_id(static_cast<size_t>(n), nullptr);
  for (const auto& [token, id] : vocab.items()) {
    auto where = [&, &token = token] { return "model.vocab[" + Show(Json(token)) + "]"; };  // only for errors
    if (const char* problem = TokenProblem(token)) return Bad(name, where() + " " + problem);
    const int64_t i = IdValue(id, n);
    if (i < 0) return Bad(name, where() + " is " + Show(id) + ", not an id in [0, " + std::to_string(n) + ")");
    if (by_id[i] != nullptr)
      return Bad(name, where() + " repeats id " + std::to_string(i) + " of " + Show(Json(*by_id[i])));
    by_id[i] = &token;
  }
  TokenizerVocab& v = out->vocab;
  for (const std::string* t : by_id) {
    v.tokens.push_back(*t);
    v.token_types.push_back(ByteTokenValue(*t) >= 0 ? TokenizerVocab::kByte : TokenizerVocab::kNormal);
  }
  out->model_size = static_cast<int32_t>(n);
  return Status::Ok();
}

// model.merges: "left right" strings or [left, right] pairs, every part and the joined token in
// model.vocab (as the library requires when it loads them).
Status ParseMerges(const Json& merges, const std::unordered_map<std::string_view, int32_t>& ids,
                   const std::string& name, TokenizerJson* out) {
  if (!merges.is_array()) return Bad(name, "model.merges is missing or not an array");
  if (merges.size() > kMaxMerges)
    return Bad(name, "model.merges has " + std::to_string(merges.size()) + " entries, more than " +
                         std::to_string(kMaxMerges));
  out->merges.reserve(merges.size());
  std::string joined;
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    auto where = [&] { return "model.merges[" + std::to_string(i) + "]"; };  // only for errors
    std::string left, right;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        return Bad(name, where() + " " + Show(m) + " is not two tokens separated by one space");
      left = s.substr(0, space), right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get_ref<const std::string&>(), right = m[1].get_ref<const std::string&>();
    } else {
      return Bad(name, where() + " is " + Show(m) + ", neither \"left right\" nor [left, right]");
    }
    joined.assign(left).append(right);
    for (const std::string* part : {&left, &right, &joined}) {
      if (ids.count(*part) == 0)
        return Bad(name, where() + " " + Show(m) + ": " + Show(Json(*part)) + " is not in model.vocab");
    }
    out->merges.emplace_back(std::move(left), std::move(right));
  }
  return Status::Ok();
}

Status ParseModel(const Json& model, const std::string& name, TokenizerJson* out) {
  TESSERA_RETURN_IF_ERROR(CheckKeys(model,
                                    {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                                     "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"},
                                    "model", name));
  TESSERA_RETURN_IF_ERROR(CheckFixed(model, "type", "BPE", false, "model.", name));
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"})
    TESSERA_RETURN_IF_ERROR(CheckFixed(model, key, nullptr, true, "model.", name));
  TESSERA_RETURN_IF_ERROR(CheckFixed(model, "fuse_unk", true, false, "model.", name));
  TESSERA_RETURN_IF_ERROR(CheckFixed(model, "byte_fallback", true, false, "model.", name));
  if (model.contains("ignore_merges"))
    TESSERA_RETURN_IF_ERROR(CheckFixed(model, "ignore_merges", false, false, "model.", name));
  TESSERA_RETURN_IF_ERROR(ParseVocab(Member(model, "vocab"), name, out));
  std::unordered_map<std::string_view, int32_t> ids;
  ids.reserve(out->vocab.tokens.size());
  for (size_t i = 0; i < out->vocab.tokens.size(); ++i) ids.emplace(out->vocab.tokens[i], static_cast<int32_t>(i));
  const auto unk = model.find("unk_token");
  if (unk == model.end() || !unk->is_string() || ids.count(unk->get_ref<const std::string&>()) == 0)
    return Bad(name, "model.unk_token is " + (unk == model.end() ? std::string("absent") : Show(*unk)) +
                         ", not a token of model.vocab");
  out->vocab.unk_id = ids.at(unk->get_ref<const std::string&>());
  return ParseMerges(Member(model, "merges"), ids, name, out);
}

// One added_tokens entry, its flags as Gemma's files have them (no stripping, no word matching).
Status ParseAddedToken(const Json& a, const std::string& where, int64_t id_limit, const std::string& name,
                       TokenizerJson::AddedToken* out) {
  TESSERA_RETURN_IF_ERROR(
      CheckKeys(a, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"}, where, name));
  for (const char* flag : {"single_word", "lstrip", "rstrip"})
    if (a.contains(flag)) TESSERA_RETURN_IF_ERROR(CheckFixed(a, flag, false, false, where + ".", name));
  for (const char* flag : {"normalized", "special"}) {
    if (!a.contains(flag) || !a[flag].is_boolean())
      return Bad(name,
                 where + "." + flag + " is " + (a.contains(flag) ? Show(a[flag]) : "absent") + ", not true or false");
  }
  if (!a.contains("content") || !a["content"].is_string())
    return Bad(name, where + ".content is missing or not a string");
  out->content = a["content"].get<std::string>();
  if (const char* problem = TokenProblem(out->content)) return Bad(name, where + ".content " + problem);
  const int64_t id = a.contains("id") ? IdValue(a["id"], id_limit) : -1;
  if (id < 0)
    return Bad(name, where + ".id is " + (a.contains("id") ? Show(a["id"]) : "absent") + ", not an id in [0, " +
                         std::to_string(id_limit) + ")");
  out->id = static_cast<int32_t>(id);
  out->special = a["special"].get<bool>();
  out->normalized = a["normalized"].get<bool>();
  return Status::Ok();
}

// added_tokens: each is model.vocab's token of that id, or one of ids model_size, model_size + 1, ...
// outside it; special ones become control tokens, the others user-defined.
Status ParseAddedTokens(const Json& added, const std::string& name, TokenizerJson* out) {
  if (added.is_null()) return Status::Ok();  // absent: none
  if (!added.is_array()) return Bad(name, "added_tokens is not an array");
  TokenizerVocab& v = out->vocab;
  const int64_t id_limit = out->model_size + static_cast<int64_t>(std::min(added.size(), kMaxVocabTokens));
  std::unordered_map<std::string, size_t> by_content;
  std::unordered_map<int32_t, size_t> by_id;
  std::vector<std::string> extra(static_cast<size_t>(id_limit - out->model_size));
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    TokenizerJson::AddedToken a;
    TESSERA_RETURN_IF_ERROR(ParseAddedToken(added[i], where, id_limit, name, &a));
    if (!by_content.emplace(a.content, i).second)
      return Bad(name, where + " repeats the content of added_tokens[" + std::to_string(by_content[a.content]) + "]");
    if (!by_id.emplace(a.id, i).second)
      return Bad(name, where + " repeats the id of added_tokens[" + std::to_string(by_id[a.id]) + "]");
    if (a.id < out->model_size && v.tokens[a.id] != a.content)
      return Bad(name, where + " " + Show(Json(a.content)) + " has id " + std::to_string(a.id) +
                           ", which model.vocab gives to " + Show(Json(v.tokens[a.id])));
    if (a.id >= out->model_size) extra[a.id - out->model_size] = a.content;
    out->added.push_back(std::move(a));
  }
  // Added tokens outside the model follow it without gaps, and are not model tokens themselves.
  size_t n_extra = 0;
  while (n_extra < extra.size() && !extra[n_extra].empty()) ++n_extra;
  for (size_t k = n_extra; k < extra.size(); ++k) {
    if (!extra[k].empty())
      return Bad(name, "added token id " + std::to_string(out->model_size + k) + " leaves a gap after model.vocab's " +
                           std::to_string(out->model_size) + " tokens");
  }
  if (n_extra > 0) {
    const std::unordered_set<std::string_view> model(v.tokens.begin(), v.tokens.end());
    for (size_t k = 0; k < n_extra; ++k) {
      if (model.count(extra[k]))
        return Bad(name, "added token " + Show(Json(extra[k])) + " has id " + std::to_string(out->model_size + k) +
                             " but is also in model.vocab");
      v.tokens.push_back(extra[k]);
      v.token_types.push_back(TokenizerVocab::kNormal);
    }
  }
  for (const TokenizerJson::AddedToken& a : out->added) {
    v.token_types[a.id] = a.special ? TokenizerVocab::kControl : TokenizerVocab::kUserDefined;
    if (a.content == "<bos>") v.bos_id = a.id;
    if (a.content == "<eos>") v.eos_id = a.id;
  }
  return Status::Ok();
}

// A TemplateProcessing element: {"SpecialToken": {"id", "type_id"}} or {"Sequence": {"id", "type_id"}}.
// `*special` gets the special token's name, or stays empty for a sequence.
Status TemplatePiece(const Json& e, const std::unordered_map<std::string, int32_t>& specials, bool pair,
                     const std::string& where, const std::string& name, std::string* special) {
  TESSERA_RETURN_IF_ERROR(CheckKeys(e, {"SpecialToken", "Sequence"}, where, name));
  if (e.size() != 1) return Bad(name, where + " is " + Show(e) + ", not one SpecialToken or Sequence");
  const bool is_special = e.contains("SpecialToken");
  const Json& body = is_special ? e["SpecialToken"] : e["Sequence"];
  const std::string at = where + (is_special ? ".SpecialToken" : ".Sequence");
  TESSERA_RETURN_IF_ERROR(CheckKeys(body, {"id", "type_id"}, at, name));
  if (!body.contains("type_id") || IdValue(body["type_id"], 2) < 0) return Bad(name, at + ".type_id is not 0 or 1");
  const Json id = body.contains("id") ? body["id"] : Json();
  const bool known =
      is_special ? id.is_string() && specials.count(id.get<std::string>()) : id == "A" || (pair && id == "B");
  if (!known)
    return Bad(name, at + ".id is " + Show(id) +
                         (is_special ? ", not a key of post_processor.special_tokens" : ", not a sequence"));
  special->clear();
  if (is_special) *special = id.get<std::string>();
  return Status::Ok();
}

// post_processor: absent, null, or the TemplateProcessing transformers writes for Gemma: the text
// alone, or one token (BOS) before it. Encode(text, true) puts that token first.
Status ParsePostProcessor(const Json& root, const std::string& name, TokenizerJson* out) {
  const auto it = root.find("post_processor");
  if (it == root.end() || it->is_null()) return Status::Ok();
  const Json& p = *it;
  TESSERA_RETURN_IF_ERROR(CheckKeys(p, {"type", "single", "pair", "special_tokens"}, "post_processor", name));
  TESSERA_RETURN_IF_ERROR(CheckFixed(p, "type", "TemplateProcessing", false, "post_processor.", name));
  std::unordered_map<std::string, int32_t> specials;
  const Json table = p.contains("special_tokens") ? p["special_tokens"] : Json::object();
  if (!table.is_object()) return Bad(name, "post_processor.special_tokens is not an object");
  const auto n = static_cast<int64_t>(out->vocab.tokens.size());
  for (const auto& [key, val] : table.items()) {
    const std::string at = "post_processor.special_tokens[" + Show(Json(key)) + "]";
    TESSERA_RETURN_IF_ERROR(CheckKeys(val, {"id", "ids", "tokens"}, at, name));
    const Json ids = val.value("ids", Json()), tokens = val.value("tokens", Json());
    const int64_t id = ids.is_array() && ids.size() == 1 ? IdValue(ids[0], n) : -1;
    if (val.value("id", Json()) != key || id < 0 || tokens != Json::array({key}) || out->vocab.tokens[id] != key)
      return Bad(name, at + " is " + Show(val) + ", not one token of that content");
    specials.emplace(key, static_cast<int32_t>(id));
  }
  for (const char* which : {"single", "pair"}) {
    const Json list = p.value(which, Json());
    if (!list.is_array()) return Bad(name, std::string("post_processor.") + which + " is not an array");
    std::vector<std::string> pieces;
    for (size_t i = 0; i < list.size(); ++i) {
      pieces.emplace_back();
      const std::string at = std::string("post_processor.") + which + "[" + std::to_string(i) + "]";
      TESSERA_RETURN_IF_ERROR(TemplatePiece(list[i], specials, which[0] == 'p', at, name, &pieces.back()));
    }
    if (which[0] == 'p') break;
    const bool text_only = pieces.size() == 1 && pieces[0].empty();
    const bool bos_text = pieces.size() == 2 && !pieces[0].empty() && pieces[1].empty();
    if (!text_only && !bos_text)
      return Bad(name, "post_processor.single is " + Show(list) + "; supported: the text alone or one token before it");
    if (bos_text) out->vocab.bos_id = specials.at(pieces[0]);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<TokenizerJson> ParseTokenizerJson(std::string_view text, const std::string& name) {
  TESSERA_RETURN_IF_ERROR(io::CheckJsonNesting(text, "tokenizer.json '" + name + "'"));
  const Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Bad(name, "not valid JSON");
  TESSERA_RETURN_IF_ERROR(CheckKeys(root,
                                    {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
                                     "post_processor", "decoder", "model"},
                                    "", name));
  if (root.contains("version")) TESSERA_RETURN_IF_ERROR(CheckFixed(root, "version", "1.0", false, "", name));
  TESSERA_RETURN_IF_ERROR(CheckFixed(root, "truncation", nullptr, true, "", name));
  TESSERA_RETURN_IF_ERROR(CheckFixed(root, "padding", nullptr, true, "", name));
  TESSERA_RETURN_IF_ERROR(CheckFixed(root, "normalizer", ReplaceSpaces(), false, "", name));
  TESSERA_RETURN_IF_ERROR(CheckFixed(root, "pre_tokenizer", SplitAtSpaces(), true, "", name));
  TESSERA_RETURN_IF_ERROR(CheckFixed(root, "decoder", ByteFallbackDecoder(), false, "", name));
  if (!root.contains("model")) return Bad(name, "model is missing");
  TokenizerJson out;
  TESSERA_RETURN_IF_ERROR(ParseModel(root["model"], name, &out));
  TESSERA_RETURN_IF_ERROR(ParseAddedTokens(Member(root, "added_tokens"), name, &out));
  TESSERA_RETURN_IF_ERROR(ParsePostProcessor(root, name, &out));
  return out;
}

}  // namespace tessera::tokenizer
