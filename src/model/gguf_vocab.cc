#include "model/gguf_vocab.h"

#include <limits>

namespace tessera::model {
namespace {

// An optional id key: -1 when absent; must index the token list.
Status ReadId(const io::GgufFile& f, const char* key, int64_t n_tokens, int32_t* out) {
  if (!f.Has(key)) return Status::Ok();
  StatusOr<int64_t> v = f.GetInt(key);
  if (!v.ok()) return v.status();
  if (v.value() < 0 || v.value() >= n_tokens)
    return InvalidArgument("GGUF '" + f.path() + "': " + key + " = " + std::to_string(v.value()) +
                           " is outside the token list [0, " + std::to_string(n_tokens) + ")");
  *out = static_cast<int32_t>(v.value());
  return Status::Ok();
}

Status ReadBool(const io::GgufFile& f, const char* key, bool* out) {
  if (!f.Has(key)) return Status::Ok();
  StatusOr<bool> v = f.GetBool(key);
  if (!v.ok()) return v.status();
  *out = v.value();
  return Status::Ok();
}

}  // namespace

StatusOr<tokenizer::TokenizerVocab> ReadGgufVocab(const io::GgufFile& f) {
  tokenizer::TokenizerVocab v;
  if (!f.Has("tokenizer.ggml.tokens") || !f.Has("tokenizer.ggml.model"))
    return InvalidArgument("GGUF '" + f.path() + "' has no tokenizer (tokenizer.ggml.model / tokenizer.ggml.tokens)");
  StatusOr<std::string> model = f.GetString("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  v.model = model.value();
  if (f.Has("tokenizer.ggml.pre")) {
    StatusOr<std::string> pre = f.GetString("tokenizer.ggml.pre");
    if (!pre.ok()) return pre.status();
    v.pre = pre.value();
  }
  StatusOr<std::vector<std::string>> tokens = f.GetStringArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  v.tokens = std::move(tokens.value());
  const int64_t n = static_cast<int64_t>(v.tokens.size());
  if (n > std::numeric_limits<int32_t>::max())
    return InvalidArgument("GGUF '" + f.path() + "': tokenizer.ggml.tokens has too many entries");
  if (f.Has("tokenizer.ggml.scores")) {
    StatusOr<std::vector<float>> s = f.GetFloatArray("tokenizer.ggml.scores");
    if (!s.ok()) return s.status();
    v.scores = std::move(s.value());
  }
  if (f.Has("tokenizer.ggml.token_type")) {
    StatusOr<std::vector<int64_t>> t = f.GetIntArray("tokenizer.ggml.token_type");
    if (!t.ok()) return t.status();
    for (int64_t x : t.value()) {
      if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
        return InvalidArgument("GGUF '" + f.path() + "': tokenizer.ggml.token_type holds " + std::to_string(x));
      v.token_types.push_back(static_cast<int32_t>(x));
    }
  }
  if (f.Has("tokenizer.ggml.merges")) {
    StatusOr<std::vector<std::string>> m = f.GetStringArray("tokenizer.ggml.merges");
    if (!m.ok()) return m.status();
    v.merges = std::move(m.value());
  }
  // (Array lengths against the token count are FromVocab's check, with the rest of the vocabulary.)
  TESSERA_RETURN_IF_ERROR(ReadId(f, "tokenizer.ggml.bos_token_id", n, &v.bos_id));
  TESSERA_RETURN_IF_ERROR(ReadId(f, "tokenizer.ggml.eos_token_id", n, &v.eos_id));
  TESSERA_RETURN_IF_ERROR(ReadId(f, "tokenizer.ggml.unknown_token_id", n, &v.unk_id));
  TESSERA_RETURN_IF_ERROR(ReadId(f, "tokenizer.ggml.padding_token_id", n, &v.pad_id));
  TESSERA_RETURN_IF_ERROR(ReadBool(f, "tokenizer.ggml.add_bos_token", &v.add_bos));
  TESSERA_RETURN_IF_ERROR(ReadBool(f, "tokenizer.ggml.add_eos_token", &v.add_eos));
  TESSERA_RETURN_IF_ERROR(ReadBool(f, "tokenizer.ggml.add_space_prefix", &v.add_space_prefix));
  return v;
}

}  // namespace tessera::model
