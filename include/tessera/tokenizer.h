// Text <-> token ids. Two sources of a tokenizer: a checkpoint's SentencePiece `tokenizer.model`
// (through Debian's libsentencepiece), or a vocabulary given as data (a GGUF's tokenizer
// metadata, TokenizerVocab). Raw ids never need one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/status.h"
#include "tessera/tokenizer_vocab.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tessera::tokenizer {

class AddedTokenMatcher;

// What the engine needs of a tokenizer, whichever format it came from.
class Tokenizer {
 public:
  virtual ~Tokenizer();

  // From a vocabulary as data (`name`, e.g. the GGUF path, is used in messages). "llama" gives a
  // SentencePieceTokenizer, "gemma4" a merges-ranked BPE tokenizer. Every field is validated.
  static StatusOr<std::unique_ptr<Tokenizer>> FromVocab(const TokenizerVocab& vocab, const std::string& name);
  // A checkpoint directory's tokenizer: tokenizer.model (SentencePiece) where present, with the
  // added tokens past its pieces that a tokenizer.json beside it lists; else tokenizer.json (the
  // Hugging Face tokenizers format, which Gemma 4 checkpoints ship). A GGUF's
  // is FromVocab(Model::TokenizerVocab()).
  static StatusOr<std::unique_ptr<Tokenizer>> FromCheckpointDir(const std::string& dir);

  // Ids of `text`, with BOS first when add_bos. Control tokens written in the text are plain text.
  virtual StatusOr<std::vector<int32_t>> Encode(const std::string& text, bool add_bos) const = 0;
  // Ids of rendered chat text: control and added tokens written in the text (<start_of_turn>,
  // <bos>, <image_soft_token>, ...) become their ids, the text between them is encoded as by
  // Encode, and no BOS is added (the template writes it). As HF tokenizers do with special tokens.
  virtual StatusOr<std::vector<int32_t>> EncodeWithSpecialTokens(const std::string& text) const;
  virtual StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const = 0;
  // The surface text of one id (for streaming output); empty for control tokens and bad ids.
  virtual std::string Piece(int32_t id) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when the vocabulary has none
  virtual int32_t eos_id() const = 0;
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::string& model_path);
  // From the bytes of a tokenizer.model (`name` is used in messages). For tests and fuzzing.
  static StatusOr<std::unique_ptr<SentencePieceTokenizer>> FromSerializedModel(const std::string& bytes,
                                                                               const std::string& name);
  // From a "llama" (SentencePiece) vocabulary: rebuilds the model Gemma's converter started from.
  static StatusOr<std::unique_ptr<SentencePieceTokenizer>> FromVocab(const TokenizerVocab& vocab,
                                                                     const std::string& name);
  ~SentencePieceTokenizer() override;

  StatusOr<std::vector<int32_t>> Encode(const std::string& text, bool add_bos) const override;
  // The control, user-defined and unknown pieces count as tokens (the ones transformers' conversion
  // of the model makes added tokens).
  StatusOr<std::vector<int32_t>> EncodeWithSpecialTokens(const std::string& text) const override;
  StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const override;
  std::string Piece(int32_t id) const override;
  int32_t vocab_size() const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;

  // Added tokens with ids past the model's pieces, read from a checkpoint's tokenizer.json
  // "added_tokens" (Gemma 3 lists <image_soft_token> there, not in tokenizer.model):
  // EncodeWithSpecialTokens finds them in text as it finds the model's control pieces.
  Status AddTokensBeyondModel(const std::string& tokenizer_json_path);
  // The same from the file's text (`name` starts every error message). For tests and fuzzing.
  Status AddTokensBeyondModelFromText(std::string_view json_text, const std::string& name);

 private:
  SentencePieceTokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::unique_ptr<AddedTokenMatcher> added_;  // the pieces EncodeWithSpecialTokens finds in text
  int32_t bos_id_ = -1, eos_id_ = -1;         // the model's own, or the vocabulary's
};

}  // namespace tessera::tokenizer
