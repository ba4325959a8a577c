// A checkpoint's tokenizer.json (the Hugging Face tokenizers format; Gemma 4 checkpoints ship only
// this). Encodes as the library does: added tokens are cut out of the raw text first (those marked
// normalized out of the normalized text), the rest has its spaces replaced by U+2581 and goes
// through the BPE model (BpeTokenizer::EncodeHfWord); Decode is its byte-fallback decoder.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/tokenizer.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_tokenizer.h"

namespace tessera::tokenizer {

class HfTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<HfTokenizer>> Load(const std::string& path);
  // From the file's content (`name` is used in messages). For tests and fuzzing.
  static StatusOr<std::unique_ptr<HfTokenizer>> FromText(std::string_view text, const std::string& name);

  // Special added tokens written in the text stay text (the library's encode_special_tokens);
  // the other added tokens are found. With add_bos, the post processor's token (else <bos>) first.
  StatusOr<std::vector<int32_t>> Encode(const std::string& text, bool add_bos) const override;
  // Every added token is found: tokenizer(text, add_special_tokens=False).
  StatusOr<std::vector<int32_t>> EncodeWithSpecialTokens(const std::string& text) const override;
  // As the library's decode with skip_special_tokens: special tokens dropped, U+2581 as a space, runs
  // of <0xXX> tokens as their bytes when those are UTF-8, else one U+FFFD per byte.
  StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const override;
  std::string Piece(int32_t id) const override { return bpe_->Piece(id); }
  int32_t vocab_size() const override { return bpe_->vocab_size(); }
  int32_t bos_id() const override { return bpe_->bos_id(); }
  int32_t eos_id() const override { return bpe_->eos_id(); }

 private:
  HfTokenizer() = default;
  Status EncodeText(const std::string& text, bool keep_special, std::vector<int32_t>* out) const;

  std::unique_ptr<BpeTokenizer> bpe_;
  AddedTokenMatcher raw_;         // added tokens with normalized false
  AddedTokenMatcher normalized_;  // with normalized true, their content normalized
};

}  // namespace tessera::tokenizer
