#include "tokenizer/vocab_check.h"

#include <cmath>

namespace tessera::tokenizer {
namespace {

Status Bad(const std::string& who, const std::string& name, const std::string& what) {
  return InvalidArgument(who + ": '" + name + "': " + what);
}

Status CheckId(const TokenizerVocab& v, int32_t id, const char* field, const std::string& who,
               const std::string& name) {
  if (id == -1 || (id >= 0 && static_cast<size_t>(id) < v.tokens.size())) return Status::Ok();
  return Bad(who, name,
             std::string(field) + " " + std::to_string(id) + " is outside [0, " + std::to_string(v.tokens.size()) +
                 ") (and not -1, absent)");
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

int ByteTokenValue(std::string_view t) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;  // SentencePiece writes upper case only
  };
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

Status CheckVocab(const TokenizerVocab& v, const std::string& who, const std::string& name) {
  const size_t n = v.tokens.size();
  if (n == 0) return Bad(who, name, "tokenizer.ggml.tokens is empty");
  if (n > kMaxVocabTokens)
    return Bad(who, name, "tokenizer.ggml.tokens has " + std::to_string(n) + " entries, more than " +
                              std::to_string(kMaxVocabTokens));
  if (!v.scores.empty() && v.scores.size() != n)
    return Bad(who, name, "tokenizer.ggml.scores has " + std::to_string(v.scores.size()) +
                              " entries for " + std::to_string(n) + " tokens");
  if (!v.token_types.empty() && v.token_types.size() != n)
    return Bad(who, name, "tokenizer.ggml.token_type has " + std::to_string(v.token_types.size()) +
                              " entries for " + std::to_string(n) + " tokens");
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = v.tokens[i];
    const std::string at = "tokenizer.ggml.tokens[" + std::to_string(i) + "]";
    if (t.empty()) return Bad(who, name, at + " is empty");
    if (t.size() > kMaxTokenBytes) return Bad(who, name, at + " is longer than " + std::to_string(kMaxTokenBytes));
    if (t.find('\0') != std::string::npos) return Bad(who, name, at + " contains a NUL byte");
    if (!IsValidUtf8(t)) return Bad(who, name, at + " is not valid UTF-8");
    const int32_t type = TypeOf(v, i);
    if (type < TokenizerVocab::kNormal || type > TokenizerVocab::kByte)
      return Bad(who, name, "tokenizer.ggml.token_type[" + std::to_string(i) + "] is " + std::to_string(type) +
                                " (known: 1 normal .. 6 byte)");
    if (type == TokenizerVocab::kByte && ByteTokenValue(t) < 0)
      return Bad(who, name, at + " '" + t + "' has the byte type but is not of the form <0xXX>");
    if (!v.scores.empty() && !std::isfinite(v.scores[i]))
      return Bad(who, name, "tokenizer.ggml.scores[" + std::to_string(i) + "] is not finite");
  }
  for (auto [id, field] : {std::pair{v.bos_id, "tokenizer.ggml.bos_token_id"},
                           {v.eos_id, "tokenizer.ggml.eos_token_id"},
                           {v.unk_id, "tokenizer.ggml.unknown_token_id"},
                           {v.pad_id, "tokenizer.ggml.padding_token_id"}}) {
    Status s = CheckId(v, id, field, who, name);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace tessera::tokenizer
