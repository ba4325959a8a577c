// Text <-> token ids with a checkpoint's SentencePiece `tokenizer.model` (the Gemma tokenizer
// format), through Debian's libsentencepiece. Raw ids never need it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tessera::tokenizer {

class SentencePieceTokenizer {
 public:
  static StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::string& model_path);
  // From the bytes of a tokenizer.model (`name` is used in messages). For tests and fuzzing.
  static StatusOr<std::unique_ptr<SentencePieceTokenizer>> FromSerializedModel(const std::string& bytes,
                                                                               const std::string& name);
  ~SentencePieceTokenizer();

  // Ids of `text`, with the model's BOS first when add_bos.
  StatusOr<std::vector<int32_t>> Encode(const std::string& text, bool add_bos) const;
  StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;
  // The surface text of one id (for streaming output); empty for control tokens.
  std::string Piece(int32_t id) const;
  int32_t vocab_size() const;

 private:
  SentencePieceTokenizer() = default;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace tessera::tokenizer
