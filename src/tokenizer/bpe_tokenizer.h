// The "gemma4" GGUF vocabulary: BPE ranked by tokenizer.ggml.merges over raw UTF-8, spaces written
// as U+2581, byte fallback through <0xXX> tokens (docs/tokenizers.md). Built by
// Tokenizer::FromVocab; no external library. Also the BPE model of a tokenizer.json (HfTokenizer),
// which tokenizes each word as the Hugging Face library does (EncodeHfWord).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tessera/tokenizer.h"
#include "tokenizer/added_tokens.h"

namespace tessera::tokenizer {

class BpeTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<BpeTokenizer>> FromVocab(const TokenizerVocab& vocab, const std::string& name);
  // A tokenizer.json BPE model, checked by its reader (tokenizer_json.cc): `v.tokens` by id, the
  // first `model_size` of them the model's vocabulary (the rest added tokens only), `merges` as
  // pairs in rank order (a repeated pair takes its last rank, as the library's map does).
  static std::unique_ptr<BpeTokenizer> FromHfModel(TokenizerVocab v, int32_t model_size,
                                                   const std::vector<std::pair<std::string, std::string>>& merges,
                                                   const std::string& name);

  StatusOr<std::vector<int32_t>> Encode(const std::string& text, bool add_bos) const override;
  // Control, user-defined and unknown tokens count as tokens.
  StatusOr<std::vector<int32_t>> EncodeWithSpecialTokens(const std::string& text) const override;
  StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const override;
  std::string Piece(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }

  // The Hugging Face BPE model on one pre-tokenized word: each character its model token, else
  // its <0xXX> byte tokens, else the unknown token (consecutive ones fused); then the merges.
  Status EncodeHfWord(std::string_view word, std::vector<int32_t>* out) const;
  // The text of token `id` (a byte token's <0xXX> name, a control token's content); "" when out of range.
  const std::string& Token(int32_t id) const;
  int32_t type(int32_t id) const { return types_[static_cast<size_t>(id)]; }

 private:
  BpeTokenizer() = default;
  // Appends the tokens among `pieces` and the ids of the text between them (EncodeRun).
  Status EncodeFragments(std::string_view text, const std::vector<AddedTokenMatcher::Piece>& pieces,
                         std::vector<int32_t>* out) const;
  // Appends the ids of one run of escaped text without user-defined tokens.
  Status EncodeRun(std::string_view run, std::vector<int32_t>* out) const;
  // BPE over the characters of `word` (no newline mixed with other characters).
  Status EncodeWord(std::string_view word, std::vector<int32_t>* out) const;
  // A symbol that is not a token: its bytes as <0xXX> tokens, else one unknown token.
  Status Fallback(std::string_view symbol, std::vector<int32_t>* out) const;
  int32_t Rank(std::string_view left, std::string_view right) const;
  // BPE over `text` cut into initial symbols of these byte lengths: joins the adjacent pair of
  // lowest rank (leftmost on ties) until no pair has one; the final symbols.
  std::vector<std::string_view> Merge(std::string_view text, const std::vector<size_t>& lengths) const;
  int32_t ModelId(std::string_view token) const;  // -1 unless a token of the model's vocabulary

  std::vector<std::string> tokens_;
  std::vector<int32_t> types_;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<std::string, int32_t> ranks_;  // key: left, NUL, right (tokens hold no NUL)
  std::vector<int32_t> user_defined_;               // matched in the raw text first, longest first
  AddedTokenMatcher added_;                         // control, user-defined and unknown tokens
  int32_t byte_ids_[256];
  int32_t bos_id_ = -1, eos_id_ = -1, unk_id_ = -1;
  int32_t model_size_ = 0;  // ids from here on are added tokens outside the BPE model
  std::string name_;
};

}  // namespace tessera::tokenizer
