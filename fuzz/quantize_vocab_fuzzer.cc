// libFuzzer target: a tokenizer.json read into the GGUF 'gemma4' vocabulary (tessera quantize,
// GgufVocabFromTokenizerJsonText). Invariants on success: one score and one kind per token, every
// kind a valid GGUF token type, and the vocabulary builds a tokenizer or is refused with a Status.
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "runtime/quantize_vocab.h"
#include "tessera/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  tessera::StatusOr<tessera::tokenizer::TokenizerVocab> v =
      tessera::GgufVocabFromTokenizerJsonText(text, "fuzz tokenizer.json");
  if (!v.ok()) {
    FUZZ_CHECK(!v.status().message().empty(), "an error without a message");
    return 0;
  }
  const auto& voc = v.value();
  FUZZ_CHECK(voc.model == "gemma4", "model");
  FUZZ_CHECK(voc.scores.size() == voc.tokens.size() && voc.token_types.size() == voc.tokens.size(),
             "scores / kinds not one per token");
  for (int32_t t : voc.token_types) FUZZ_CHECK(t >= 1 && t <= 6, "token type out of range");
  (void)tessera::tokenizer::Tokenizer::FromVocab(voc, "fuzz");
  return 0;
}
