// libFuzzer target: a Hugging Face tokenizer.json (tokenizer::HfTokenizer::FromText, what
// Tokenizer::FromCheckpointDir reads when a checkpoint has no tokenizer.model). On success the
// tokenizer must serve: encode a fixed text with Gemma's control tokens and the first tokens'
// pieces in it (with and without special tokens) to ids inside the vocabulary, decode them, and
// give pieces for any id.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "tokenizer/hf_tokenizer.h"

namespace {

using tessera::tokenizer::HfTokenizer;

void CheckIds(const HfTokenizer& t, const tessera::StatusOr<std::vector<int32_t>>& ids) {
  if (!ids.ok()) {
    FUZZ_CHECK(!ids.status().message().empty(), "an error must say what is wrong");
    return;
  }
  for (int32_t id : ids.value()) FUZZ_CHECK(id >= 0 && id < t.vocab_size(), "encoded id outside the vocabulary");
  FUZZ_CHECK(t.Decode(ids.value()).ok(), "encoded ids must decode");
}

void Check(const std::string& bytes) {
  auto r = HfTokenizer::FromText(bytes, "fuzz.json");
  if (!r.ok()) {
    FUZZ_CHECK(!r.status().message().empty(), "an error must say what is wrong");
    return;
  }
  const HfTokenizer& t = *r.value();
  const int32_t n = t.vocab_size();
  FUZZ_CHECK(n > 0, "an accepted file has tokens");
  std::string text = "Hello world,  123 \xc3\xa9t\xc3\xa9\n\n<bos><start_of_turn>user\n\xf0\x9f\x99\x82";
  for (int32_t id = 0; id < n && id < 64; ++id) text += t.Piece(id);
  CheckIds(t, t.Encode(text, /*add_bos=*/true));
  CheckIds(t, t.EncodeWithSpecialTokens(text));
  FUZZ_CHECK(!t.Decode({-1}).ok() && !t.Decode({n}).ok(), "out-of-range ids must be refused");
  for (int32_t id : {-1, 0, 1, n / 2, n - 1, n}) (void)t.Piece(id);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tessera::fuzz::NoEscape("HfTokenizer::FromText", [&] { Check(bytes); });
  return 0;
}
