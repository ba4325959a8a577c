// libFuzzer target: a SentencePiece tokenizer.model
// (tokenizer::SentencePieceTokenizer::FromSerializedModel, the model bytes Load reads).
// On success the tokenizer must serve a few requests without failing: encode a fixed text,
// decode the ids back, and return pieces for in-range and out-of-range ids.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "tessera/tokenizer.h"

namespace {

using tessera::tokenizer::SentencePieceTokenizer;

void Check(const std::string& bytes) {
  auto r = SentencePieceTokenizer::FromSerializedModel(bytes, "fuzz.model");
  if (!r.ok()) {
    FUZZ_CHECK(!r.status().message().empty(), "an error must say what is wrong");
    return;
  }
  const SentencePieceTokenizer& t = *r.value();
  const int32_t n = t.vocab_size();
  FUZZ_CHECK(n >= 0, "negative vocab size");
  auto ids = t.Encode("Hello world, 123 \xc3\xa9t\xc3\xa9!", /*add_bos=*/true);
  if (ids.ok()) {
    for (int32_t id : ids.value()) FUZZ_CHECK(id >= 0 && id < n, "encoded id outside the vocabulary");
    (void)t.Decode(ids.value());
  }
  FUZZ_CHECK(!t.Decode({-1}).ok() && !t.Decode({n}).ok(), "out-of-range ids must be refused");
  for (int32_t id : {-1, 0, 1, n / 2, n - 1, n}) (void)t.Piece(id);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tessera::fuzz::NoEscape("SentencePieceTokenizer::FromSerializedModel", [&] { Check(bytes); });
  return 0;
}
