// libFuzzer target: tokenizer::Tokenizer::FromVocab, the vocabulary a GGUF's tokenizer metadata
// gives ("llama": rebuilt as a SentencePiece model; "gemma4": merges-ranked BPE). The input is
// decoded into a TokenizerVocab (layout below; fuzz/tokenizer_vocab_corpus.py writes the seeds)
// and the rest of it is text to encode. On success the tokenizer must encode to in-range ids,
// decode them, give pieces, and refuse out-of-range ids.
//   u8 model (0 llama, 1 gemma4, else "x"); u8 flags (1 add_space_prefix, 2 scores, 4 types,
//   8 append the 256 <0xXX> byte tokens); i8 bos, eos, unk, pad ids; u8 token count, then per
//   token u8 length + bytes; [types: u8 each]; [scores: i8 each, /4, 127 = NaN];
//   u8 merge count, then per merge u8 length + bytes; the rest: text.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "tessera/tokenizer.h"

namespace {

using tessera::tokenizer::Tokenizer;
using tessera::tokenizer::TokenizerVocab;

struct Reader {
  const uint8_t* p;
  size_t n;
  uint8_t U8() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  std::string Bytes(size_t k) {
    k = k < n ? k : n;
    std::string s(reinterpret_cast<const char*>(p), k);
    p += k, n -= k;
    return s;
  }
};

TokenizerVocab Decode(Reader& r) {
  TokenizerVocab v;
  const uint8_t model = r.U8(), flags = r.U8();
  v.model = model == 0 ? "llama" : model == 1 ? "gemma4" : "x";
  v.add_space_prefix = flags & 1;
  int32_t* ids[] = {&v.bos_id, &v.eos_id, &v.unk_id, &v.pad_id};
  for (int32_t* id : ids) *id = static_cast<int8_t>(r.U8());
  const size_t count = r.U8();
  for (size_t i = 0; i < count; ++i) v.tokens.push_back(r.Bytes(r.U8()));
  if (flags & 4)
    for (size_t i = 0; i < count; ++i) v.token_types.push_back(r.U8() % 8);
  if (flags & 2)
    for (size_t i = 0; i < count; ++i) {
      const auto b = static_cast<int8_t>(r.U8());
      v.scores.push_back(b == 127 ? std::nanf("") : b / 4.0f);
    }
  if (flags & 8) {
    static const char* kHex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      v.tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
      if (flags & 4) v.token_types.push_back(TokenizerVocab::kByte);
      if (flags & 2) v.scores.push_back(0.0f);
    }
  }
  const size_t merges = r.U8();
  for (size_t i = 0; i < merges; ++i) v.merges.push_back(r.Bytes(r.U8()));
  return v;
}

void Check(const uint8_t* data, size_t size) {
  Reader r{data, size};
  const TokenizerVocab v = Decode(r);
  const std::string text = r.Bytes(r.n);
  auto t = Tokenizer::FromVocab(v, "fuzz.gguf");
  if (!t.ok()) {
    FUZZ_CHECK(!t.status().message().empty(), "an error must say what is wrong");
    return;
  }
  const Tokenizer& tok = *t.value();
  const int32_t n = tok.vocab_size();
  FUZZ_CHECK(n == static_cast<int32_t>(v.tokens.size()), "vocab_size differs from the token count");
  for (const std::string& s : {text, std::string("Hello  world\n\n\xc3\xa9t\xc3\xa9 \xf0\x9f\x99\x82 42")}) {
    auto ids = tok.Encode(s, /*add_bos=*/true);
    if (!ids.ok()) continue;  // e.g. a byte with no token and no unknown token
    for (int32_t id : ids.value()) FUZZ_CHECK(id >= 0 && id < n, "encoded id outside the vocabulary");
    FUZZ_CHECK(tok.Decode(ids.value()).ok(), "encoded ids must decode");
    for (int32_t id : ids.value()) (void)tok.Piece(id);
  }
  FUZZ_CHECK(!tok.Decode({-1}).ok() && !tok.Decode({n}).ok(), "out-of-range ids must be refused");
  for (int32_t id : {-1, 0, n / 2, n - 1, n}) (void)tok.Piece(id);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::NoEscape("Tokenizer::FromVocab", [&] { Check(data, size); });
  return 0;
}
