// Checks of a TokenizerVocab shared by both tokenizer kinds, so that a malformed GGUF vocabulary
// is refused with the field named before any tokenizer library sees it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/status.h"
#include "tessera/tokenizer_vocab.h"

namespace tessera::tokenizer {

// Far above any real vocabulary (Gemma: 262144); keeps a forged size from exhausting memory.
constexpr size_t kMaxVocabTokens = size_t{1} << 22;
constexpr size_t kMaxTokenBytes = 1 << 16;

// Sizes agree, ids are in range, types are known, every token is non-empty valid UTF-8 without
// NUL, scores are finite. Messages start with "<who>: '<name>': " and name the field.
Status CheckVocab(const TokenizerVocab& v, const std::string& who, const std::string& name);

// The type of token `id` (kNormal when token_types is empty).
inline int32_t TypeOf(const TokenizerVocab& v, size_t id) {
  return v.token_types.empty() ? TokenizerVocab::kNormal : v.token_types[id];
}

// The byte a "<0xXX>" token stands for, or -1 when `token` is not of that form.
int ByteTokenValue(std::string_view token);

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool IsValidUtf8(std::string_view s);

}  // namespace tessera::tokenizer
