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

// A hand-made "gemma4" vocabulary; the expected ids below are worked out by hand from the BPE
// rules (lowest merge rank first, then leftmost) and llama.cpp's handling of the GGUF.
TokenizerVocab HandMadeBpe() {
  TokenizerVocab v;
  v.model = "gemma4";
  v.tokens = {"<pad>", "<eos>", "<bos>", "<unk>", "<|channel>", "a", "b", "c", "\xe2\x96\x81", "ab", "bc", "abc",
              "\xe2\x96\x81" "a", "\n", "\n\n", "aa", "\n\n\n\n"};
  v.token_types = {3, 3, 3, 2, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  static const char* kHex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
    v.token_types.push_back(TokenizerVocab::kByte);
  }
  v.scores.assign(v.tokens.size(), -1000.0f);
  v.merges = {"b c", "a b", "a bc", "\xe2\x96\x81 a", "\n \n", "a a"};
  v.bos_id = 2, v.eos_id = 1, v.pad_id = 0;
  return v;
}

constexpr int32_t kByte0 = 17;  // id of <0x00> in HandMadeBpe

TEST(TokenizerVocab, BpeMergesByRankThenLeftmost) {
  auto t = Tokenizer::FromVocab(HandMadeBpe(), "hand.gguf");
  ASSERT_TRUE(t.ok()) << t.status().message();
  const Tokenizer& tok = *t.value();
  EXPECT_EQ(tok.vocab_size(), 273);
  const std::vector<std::pair<std::string, std::vector<int32_t>>> cases = {
      {"", {}},
      {"abc", {11}},          // b+c (rank 0) before a+b (rank 1), then a+bc
      {"ab", {9}},
      {"cab", {7, 9}},
      {" a b", {12, 8, 6}},   // spaces become U+2581; only the first one merges
      {"aaa", {15, 5}},       // a tie: the leftmost pair merges first
      {"\xc3\xa9" "d", {kByte0 + 0xc3, kByte0 + 0xa9, kByte0 + 'd'}},  // not tokens: bytes
      {"\n\n", {14}},
      {"\n\n\n", {14, 13}},
      {"\n\n\n\n", {16}},   // a whole newline run that is a token, although no merge makes it
      {"a\nb", {5, 13, 6}},
      {"x<|channel>abc", {kByte0 + 'x', 4, 11}},  // user-defined tokens are cut out first
      {"<bos>", {kByte0 + '<', 6, kByte0 + 'o', kByte0 + 's', kByte0 + '>'}},  // control: text
  };
  for (const auto& [text, ids] : cases) {
    EXPECT_EQ(tok.Encode(text, false).value(), ids) << "'" << text << "'";
    std::vector<int32_t> with_bos = {2};
    with_bos.insert(with_bos.end(), ids.begin(), ids.end());
    EXPECT_EQ(tok.Encode(text, true).value(), with_bos) << "'" << text << "'";
    EXPECT_EQ(tok.Decode(ids).value(), text);
  }
  EXPECT_EQ(tok.Decode({2, 12, 8, 6, kByte0 + 0xc3, kByte0 + 0xa9, 4, 1}).value(), " a b\xc3\xa9<|channel>");
  EXPECT_EQ(tok.Piece(8), " ");
  EXPECT_EQ(tok.Piece(2), "");
  EXPECT_EQ(tok.Piece(kByte0 + 0xc3), "\xc3");
  EXPECT_EQ(tok.Piece(-1), "");
  EXPECT_EQ(tok.Piece(273), "");
  EXPECT_EQ(tok.bos_id(), 2);
  EXPECT_EQ(tok.eos_id(), 1);
  auto bad = tok.Decode({5, 273});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("id 273 is outside [0, 273)"), std::string::npos);
}

// Control, unknown and user-defined tokens written in the text are their ids; the text between is
// tokenized as by Encode.
TEST(TokenizerVocab, BpeSpecialTokensInText) {
  auto t = Tokenizer::FromVocab(HandMadeBpe(), "hand.gguf");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t.value()->EncodeWithSpecialTokens("x<|channel><bos>abc<unk>\n\n\n<eos>").value(),
            (std::vector<int32_t>{kByte0 + 'x', 4, 2, 11, 3, 14, 13, 1}));
  EXPECT_EQ(t.value()->EncodeWithSpecialTokens("<bo").value(), (std::vector<int32_t>{kByte0 + '<', 6, kByte0 + 'o'}));
}

TEST(TokenizerVocab, BpeWithoutByteTokens) {
  TokenizerVocab v = HandMadeBpe();
  v.tokens.resize(kByte0), v.token_types.resize(kByte0), v.scores.resize(kByte0);
  auto no_unk = Tokenizer::FromVocab(v, "nobytes.gguf");
  ASSERT_TRUE(no_unk.ok()) << no_unk.status().message();
  auto err = no_unk.value()->Encode("abz", false);
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find("'z' is not a token, and neither its <0xXX> byte tokens nor an unknown"),
            std::string::npos)
      << err.status().message();
  v.unk_id = 3;
  auto with_unk = Tokenizer::FromVocab(v, "nobytes.gguf");
  ASSERT_TRUE(with_unk.ok());
  EXPECT_EQ(with_unk.value()->Encode("abz", false).value(), (std::vector<int32_t>{9, 3}));
  EXPECT_EQ(with_unk.value()->Encode("z\xc3\xa9z a", false).value(), (std::vector<int32_t>{3, 3, 3, 12}));
}

TEST(TokenizerVocab, BadBpeVocabulariesAreClearErrors) {
  const std::vector<std::pair<std::function<void(TokenizerVocab&)>, std::string>> cases = {
      {[](TokenizerVocab& v) { v.merges.clear(); }, "tokenizer.ggml.merges is missing or empty"},
      {[](TokenizerVocab& v) { v.merges[2] = "abc"; }, "tokenizer.ggml.merges[2] is not two UTF-8 parts"},
      {[](TokenizerVocab& v) { v.merges[2] = " a"; }, "tokenizer.ggml.merges[2]"},
      {[](TokenizerVocab& v) { v.merges[2] = "a "; }, "tokenizer.ggml.merges[2]"},
      {[](TokenizerVocab& v) { v.merges[2] = "a \xff"; }, "tokenizer.ggml.merges[2]"},
      {[](TokenizerVocab& v) { v.tokens[10] = "ab"; }, "tokenizer.ggml.tokens[10] 'ab' repeats token 9"},
      {[](TokenizerVocab& v) { v.token_types[5] = 6; }, "tokens[5] 'a' has the byte type"},
      {[](TokenizerVocab& v) { v.eos_id = 273; }, "tokenizer.ggml.eos_token_id 273"},
      {[](TokenizerVocab& v) { v.scores.resize(3); }, "tokenizer.ggml.scores has 3 entries"},
  };
  for (const auto& [mutate, needle] : cases) {
    TokenizerVocab v = HandMadeBpe();
    mutate(v);
    ExpectError(v, needle);
  }
}

}  // namespace
}  // namespace tessera::tokenizer
