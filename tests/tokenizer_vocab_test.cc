// Tokenizer::FromVocab on SentencePiece ("llama") vocabularies: the pieces, scores and types of an
// existing tokenizer.model, read back through libsentencepiece, must give a tokenizer that agrees
// with loading that model file (the reference) on every id and a varied corpus. Models:
// tests/testdata/tokenizer/gemma_style.model (python/scripts/make_gemma_style_tokenizer.py: Gemma's
// options) and tiny.model (NFKC, dummy prefix: what add_space_prefix stands for).
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <set>

#include "tessera/tokenizer.h"

#ifndef TESSERA_TESTDATA_DIR
#define TESSERA_TESTDATA_DIR "tests/testdata"
#endif

namespace tessera::tokenizer {
namespace {

const std::string kGemmaStyle = TESSERA_TESTDATA_DIR "/tokenizer/gemma_style.model";
const std::string kTiny = TESSERA_TESTDATA_DIR "/tokenizer/tiny.model";

// What llama.cpp's converter writes for a tokenizer.model (libsentencepiece 0.1.97 cannot tell
// user-defined pieces from normal ones: the test names them).
TokenizerVocab VocabOf(const std::string& path, const std::set<std::string>& user_defined, bool space_prefix) {
  sentencepiece::SentencePieceProcessor sp;
  EXPECT_TRUE(sp.Load(path).ok()) << path;
  TokenizerVocab v;
  v.model = "llama";
  for (int i = 0; i < sp.GetPieceSize(); ++i) {
    v.tokens.push_back(sp.IdToPiece(i));
    v.scores.push_back(sp.GetScore(i));
    int32_t t = TokenizerVocab::kNormal;
    if (sp.IsUnknown(i)) t = TokenizerVocab::kUnknown;
    else if (sp.IsControl(i)) t = TokenizerVocab::kControl;
    else if (sp.IsUnused(i)) t = TokenizerVocab::kUnused;
    else if (sp.IsByte(i)) t = TokenizerVocab::kByte;
    else if (user_defined.count(v.tokens.back())) t = TokenizerVocab::kUserDefined;
    v.token_types.push_back(t);
  }
  v.bos_id = sp.bos_id(), v.eos_id = sp.eos_id(), v.unk_id = sp.unk_id(), v.pad_id = sp.pad_id();
  v.add_space_prefix = space_prefix;
  return v;
}

TokenizerVocab GemmaStyleVocab() {
  return VocabOf(kGemmaStyle, {"\n\n", "\t", "\xe2\x96\x81\xe2\x96\x81\xe2\x96\x81\xe2\x96\x81", "tessera"}, false);
}

std::vector<std::string> Corpus() {
  std::vector<std::string> c = {
      "", " ", "  ", "\n", "\n\n", "\n\n\n", "\t", "a", "the image model", "  leading and trailing  ",
      "Hello, World! 123 4567 3.14159", "München café naïve résumé", "Москва привет мир",
      "東京 日本語 こんにちは 안녕하세요", "مرحبا שלום", "emoji 🙂🚀 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "tab\tseparated\tvalues",
      "line one\nline two\n\nparagraph", "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
      "<bos><eos><pad><unk><mask> control tokens as text", "<start_of_image> not special here",
      "zero\u200bwidth and \xc2\xa0nbsp", "\x01\x02 control bytes \x7f", "ＦＵＬＬ width ｶﾀｶﾅ", "ﬁ ligature ①②",
      "gemma tessera attention window block cache quantized weights",
  };
  std::mt19937 rng(11);
  const std::vector<std::string> atoms = {"the", " ", "  ", "\n", "é", "東", "🙂", "42", "<start_of_turn>",
                                          "model", "\t", "ça", "x", "-", "\n\n", "ß"};
  for (int i = 0; i < 300; ++i) {
    std::string s;
    for (int n = static_cast<int>(rng() % 12); n > 0; --n) s += atoms[rng() % atoms.size()];
    c.push_back(s);
  }
  return c;
}

// `any_ids`: also decode random id sequences (not for a model whose trimming of repeated
// whitespace the vocabulary cannot express: it strips every leading space piece on decode).
void ExpectSameTokenizer(const SentencePieceTokenizer& ref, const Tokenizer& got,
                         const std::vector<std::string>& corpus, bool any_ids = true) {
  ASSERT_EQ(got.vocab_size(), ref.vocab_size());
  EXPECT_EQ(got.bos_id(), ref.bos_id());
  EXPECT_EQ(got.eos_id(), ref.eos_id());
  for (int32_t id = -1; id <= ref.vocab_size(); ++id) EXPECT_EQ(got.Piece(id), ref.Piece(id)) << "id " << id;
  for (const std::string& s : corpus) {
    for (bool bos : {false, true}) {
      auto want = ref.Encode(s, bos);
      auto ids = got.Encode(s, bos);
      ASSERT_TRUE(want.ok() && ids.ok()) << s;
      EXPECT_EQ(ids.value(), want.value()) << "text '" << s << "'";
      EXPECT_EQ(got.Decode(ids.value()).value(), ref.Decode(want.value()).value()) << s;
    }
  }
  std::mt19937 rng(5);  // any id sequence decodes the same
  for (int i = 0; any_ids && i < 200; ++i) {
    std::vector<int32_t> ids(rng() % 8);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(ref.vocab_size()));
    EXPECT_EQ(got.Decode(ids).value(), ref.Decode(ids).value()) << ::testing::PrintToString(ids);
  }
}

TEST(TokenizerVocab, GemmaStyleModelRebuiltFromItsPiecesAgrees) {
  auto ref = SentencePieceTokenizer::Load(kGemmaStyle);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  auto got = Tokenizer::FromVocab(GemmaStyleVocab(), "gemma_style");
  ASSERT_TRUE(got.ok()) << got.status().message();
  ExpectSameTokenizer(*ref.value(), *got.value(), Corpus());
  // Byte fallback for characters outside the vocabulary, and streaming pieces that concatenate.
  const std::vector<int32_t> ids = got.value()->Encode("ok 🙂", false).value();
  std::string streamed;
  for (int32_t id : ids) streamed += got.value()->Piece(id);
  EXPECT_EQ(streamed, "ok 🙂");
  EXPECT_GT(ids.size(), 4u);
  EXPECT_EQ(got.value()->Encode("x", true).value().front(), 2);
  EXPECT_EQ(got.value()->eos_id(), 1);
}

TEST(TokenizerVocab, UnknownTokenMarkedControlAsGemmasConverterWritesIt) {
  // Gemma's tokenizer_config lists <unk> as special, so the converter writes it as a control
  // token and no unknown_token_id: it must still serve as SentencePiece's unknown piece.
  auto ref = SentencePieceTokenizer::Load(kGemmaStyle);
  TokenizerVocab v = GemmaStyleVocab();
  v.token_types[3] = TokenizerVocab::kControl, v.unk_id = -1;
  auto got = Tokenizer::FromVocab(v, "unk_control");
  ASSERT_TRUE(ref.ok() && got.ok()) << got.status().message();
  ExpectSameTokenizer(*ref.value(), *got.value(), Corpus());
}

TEST(TokenizerVocab, UserDefinedPiecesWithPlainSpacesAsTheConverterWritesThem) {
  // llama.cpp's converter writes U+2581 in user-defined pieces as plain spaces; a user-defined
  // "\t" stays; both must still match. Normal pieces never hold a plain space.
  TokenizerVocab v = GemmaStyleVocab();
  const auto it = std::find(v.tokens.begin(), v.tokens.end(), "\xe2\x96\x81\xe2\x96\x81");
  ASSERT_NE(it, v.tokens.end());
  const size_t id = static_cast<size_t>(it - v.tokens.begin());
  auto ref = Tokenizer::FromVocab(v, "marker");
  v.tokens[id] = "  ";
  auto spaced = Tokenizer::FromVocab(v, "spaces");
  ASSERT_TRUE(ref.ok() && spaced.ok()) << spaced.status().message();
  for (const char* s : {"a  b", "    x", "  \n  "})
    EXPECT_EQ(spaced.value()->Encode(s, false).value(), ref.value()->Encode(s, false).value()) << s;
}

TEST(TokenizerVocab, SpacePrefixVocabularyMatchesDummyPrefixModel) {
  // tiny.model normalizes with NFKC and trims whitespace, which a GGUF vocabulary cannot carry;
  // on text those leave alone, add_space_prefix must reproduce its dummy prefix.
  auto ref = SentencePieceTokenizer::Load(kTiny);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  auto got = Tokenizer::FromVocab(VocabOf(kTiny, {}, true), "tiny");
  ASSERT_TRUE(got.ok()) << got.status().message();
  ExpectSameTokenizer(*ref.value(), *got.value(),
                      {"the image model", "attention window block cache", "gemma tessera", "a b c", "xyz 42"},
                      /*any_ids=*/false);
  EXPECT_EQ(got.value()->Encode("the image model", false).value(), (std::vector<int32_t>{24, 43, 50, 10, 9, 15}));
}

void ExpectError(const TokenizerVocab& v, const std::string& needle) {
  auto t = Tokenizer::FromVocab(v, "bad.gguf");
  ASSERT_FALSE(t.ok()) << "expected an error about " << needle;
  EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("bad.gguf"), std::string::npos) << t.status().message();
}

TEST(TokenizerVocab, BadVocabulariesAreClearErrors) {
  const TokenizerVocab good = GemmaStyleVocab();
  const std::vector<std::pair<std::function<void(TokenizerVocab&)>, std::string>> cases = {
      {[](TokenizerVocab& v) { v.model = "t5"; }, "tokenizer.ggml.model 't5'"},
      {[](TokenizerVocab& v) { v.tokens.clear(), v.scores.clear(), v.token_types.clear(); }, "is empty"},
      {[](TokenizerVocab& v) { v.scores.pop_back(); }, "tokenizer.ggml.scores has 511 entries for 512"},
      {[](TokenizerVocab& v) { v.token_types.push_back(1); }, "tokenizer.ggml.token_type has 513"},
      {[](TokenizerVocab& v) { v.token_types[20] = 9; }, "tokenizer.ggml.token_type[20] is 9"},
      {[](TokenizerVocab& v) { v.token_types[20] = 0; }, "tokenizer.ggml.token_type[20] is 0"},
      {[](TokenizerVocab& v) { v.tokens[300] = ""; }, "tokenizer.ggml.tokens[300] is empty"},
      {[](TokenizerVocab& v) { v.tokens[300] = std::string("a\0b", 3); }, "tokens[300] contains a NUL"},
      {[](TokenizerVocab& v) { v.tokens[300] = "\xff\xfe"; }, "tokens[300] is not valid UTF-8"},
      {[](TokenizerVocab& v) { v.tokens[300] = "\xed\xa0\x80"; }, "tokens[300] is not valid UTF-8"},
      {[](TokenizerVocab& v) { v.tokens[301] = v.tokens[300]; }, "tokens[301]"},
      {[](TokenizerVocab& v) { v.scores[7] = std::nanf(""); }, "tokenizer.ggml.scores[7] is not finite"},
      {[](TokenizerVocab& v) { v.bos_id = 512; }, "tokenizer.ggml.bos_token_id 512 is outside [0, 512)"},
      {[](TokenizerVocab& v) { v.eos_id = -7; }, "tokenizer.ggml.eos_token_id -7"},
      {[](TokenizerVocab& v) { v.pad_id = 1 << 30; }, "tokenizer.ggml.padding_token_id"},
      {[](TokenizerVocab& v) { v.unk_id = 100000; }, "tokenizer.ggml.unknown_token_id 100000"},
      {[](TokenizerVocab& v) { v.unk_id = 20; }, "unknown_token_id 20 names a token of type 6"},
      {[](TokenizerVocab& v) { v.unk_id = -1, v.token_types[400] = 2; }, "tokens 3 and 400 both have the unknown"},
      {[](TokenizerVocab& v) { v.unk_id = -1, v.tokens[3] = "<?>", v.token_types[3] = 3, v.token_types[0] = 5; },
       "no unknown token"},
      {[](TokenizerVocab& v) { v.token_types[20] = 1; }, "all 256 byte tokens"},
      {[](TokenizerVocab& v) { v.tokens[20] = "<0x0G>"; }, "has the byte type but is not of the form"},
      {[](TokenizerVocab& v) { v.tokens[20] = v.tokens[21]; }, "appears twice"},
  };
  for (const auto& [mutate, needle] : cases) {
    TokenizerVocab v = good;
    mutate(v);
    ExpectError(v, needle);
  }
}

}  // namespace
}  // namespace tessera::tokenizer
