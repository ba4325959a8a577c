#include "tessera/tokenizer.h"

#include <filesystem>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/hf_tokenizer.h"

namespace tessera::tokenizer {

Tokenizer::~Tokenizer() = default;

StatusOr<std::vector<int32_t>> Tokenizer::EncodeWithSpecialTokens(const std::string&) const {
  return Unimplemented("Tokenizer: this tokenizer does not parse special tokens in text");
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromCheckpointDir(const std::string& dir) {
  // Anything named tokenizer.model (a FIFO, a dangling link) is the one to read, and its errors stand.
  auto present = [](const std::string& path) {
    std::error_code ec;
    return std::filesystem::symlink_status(path, ec).type() != std::filesystem::file_type::not_found;
  };
  const std::string model = dir + "/tokenizer.model", json = dir + "/tokenizer.json";
  if (present(model)) {
    StatusOr<std::unique_ptr<SentencePieceTokenizer>> t = SentencePieceTokenizer::Load(model);
    if (!t.ok()) return t.status();
    if (present(json)) TESSERA_RETURN_IF_ERROR(t.value()->AddTokensBeyondModel(json));
    return std::unique_ptr<Tokenizer>(std::move(t.value()));
  }
  if (present(json)) {
    StatusOr<std::unique_ptr<HfTokenizer>> t = HfTokenizer::Load(json);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Tokenizer>(std::move(t.value()));
  }
  return InvalidArgument("Tokenizer: '" + dir + "' has neither tokenizer.model nor tokenizer.json");
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
