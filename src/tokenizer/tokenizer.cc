#include "tessera/tokenizer.h"

#include "tokenizer/bpe_tokenizer.h"

namespace tessera::tokenizer {

Tokenizer::~Tokenizer() = default;

StatusOr<std::vector<int32_t>> Tokenizer::EncodeWithSpecialTokens(const std::string&) const {
  return Unimplemented("Tokenizer: this tokenizer does not parse special tokens in text");
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromCheckpointDir(const std::string& dir) {
  StatusOr<std::unique_ptr<SentencePieceTokenizer>> t = SentencePieceTokenizer::Load(dir + "/tokenizer.model");
  if (!t.ok()) return t.status();
  return std::unique_ptr<Tokenizer>(std::move(t.value()));
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromVocab(const TokenizerVocab& vocab, const std::string& name) {
  if (vocab.model == "llama") {
    StatusOr<std::unique_ptr<SentencePieceTokenizer>> t = SentencePieceTokenizer::FromVocab(vocab, name);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Tokenizer>(std::move(t.value()));
  }
  if (vocab.model == "gemma4") {
    StatusOr<std::unique_ptr<BpeTokenizer>> t = BpeTokenizer::FromVocab(vocab, name);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Tokenizer>(std::move(t.value()));
  }
  return Unimplemented("Tokenizer: '" + name + "': tokenizer.ggml.model '" + vocab.model +
                       "' is not supported (known: llama, gemma4)");
}

}  // namespace tessera::tokenizer
