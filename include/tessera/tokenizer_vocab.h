// A tokenizer's vocabulary as plain data: what a GGUF's tokenizer.ggml.* metadata holds, with no
// dependency on the GGUF reader or SentencePiece: a public header of the io layer, so that a loader
// can fill it in; tokenizer::Tokenizer::FromVocab builds from it. See docs/tokenizers.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::tokenizer {

struct TokenizerVocab {
  // tokenizer.ggml.token_type values (the SentencePiece piece types, as llama.cpp numbers them).
  enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

  // tokenizer.ggml.model: "llama" (SentencePiece BPE: pieces ranked by score; Gemma 3) or
  // "gemma4" (BPE ranked by tokenizer.ggml.merges; Gemma 4).
  std::string model;
  std::string pre;                   // tokenizer.ggml.pre; informational
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens, id order; UTF-8, spaces as U+2581
  std::vector<float> scores;         // tokenizer.ggml.scores: tokens.size() entries, or empty (all 0)
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type: tokens.size() entries, or empty (all normal)
  std::vector<std::string> merges;   // tokenizer.ggml.merges, "left right", rank order ("gemma4" only)
  int32_t bos_id = -1;               // tokenizer.ggml.bos_token_id etc.; -1 when absent
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  // Flags the caller applies (Encode takes add_bos) except add_space_prefix. When a key is absent
  // llama.cpp assumes add_bos true, add_eos false, add_space_prefix true for "llama" and false
  // for "gemma4"; Gemma's converter always writes add_space_prefix (false).
  bool add_bos = true;            // tokenizer.ggml.add_bos_token
  bool add_eos = false;           // tokenizer.ggml.add_eos_token
  bool add_space_prefix = false;  // tokenizer.ggml.add_space_prefix
};

}  // namespace tessera::tokenizer
