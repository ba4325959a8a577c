// Reading a Hugging Face tokenizers JSON file (tokenizer.json) of the shape transformers writes for
// Gemma 3 and Gemma 4: a BPE model with byte fallback and merges, spaces replaced by U+2581, added
// tokens, the byte-fallback decoder. Everything else the format can express is refused with the
// field named (docs/tokenizers.md lists what is accepted). HfTokenizer builds on the result.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/status.h"
#include "tessera/tokenizer_vocab.h"

namespace tessera::tokenizer {

// Far above Gemma's file (a few tens of MiB); the parsed document takes several times this.
constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t{256} << 20;

struct TokenizerJson {
  struct AddedToken {
    std::string content;
    int32_t id;
    bool special;     // skipped by decode; left as text by Encode
    bool normalized;  // matched in the normalized text (spaces as U+2581) rather than the raw text
  };
  // Tokens by id: model.vocab's, then the added tokens outside it. Types: special added tokens
  // control, other added tokens user-defined, <0xXX> byte, the rest normal. bos_id: the post
  // processor's leading token, else "<bos>"; eos_id "<eos>"; unk_id model.unk_token; -1 if absent.
  TokenizerVocab vocab;
  int32_t model_size = 0;                                   // the size of model.vocab
  std::vector<std::pair<std::string, std::string>> merges;  // model.merges in rank order
  std::vector<AddedToken> added;                            // in file order
};

// `text`: the file's content; `name` (its path) starts every error message.
StatusOr<TokenizerJson> ParseTokenizerJson(std::string_view text, const std::string& name);

}  // namespace tessera::tokenizer
