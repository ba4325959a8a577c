// SentencePiece tokenizer on a tiny model (tests/testdata/tokenizer/tiny.model, made by
// python/scripts/make_tiny_tokenizer.sh). Expected ids were produced by Debian's spm_encode.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "tessera/tokenizer.h"
#include "temp_dir.h"

#ifndef TESSERA_TESTDATA_DIR
#define TESSERA_TESTDATA_DIR "tests/testdata"
#endif

namespace tessera::tokenizer {
namespace {

TEST(SentencePieceTokenizer, EncodesLikeSpmEncodeAndRoundTrips) {
  auto tok = SentencePieceTokenizer::Load(TESSERA_TESTDATA_DIR "/tokenizer/tiny.model");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const auto& t = *tok.value();
  EXPECT_EQ(t.vocab_size(), 64);
  EXPECT_EQ(t.Encode("the image model", false).value(), (std::vector<int32_t>{24, 43, 50, 10, 9, 15}));
  EXPECT_EQ(t.Encode("attention window block cache", true).value(),
            (std::vector<int32_t>{2, 43, 46, 45, 45, 5, 45, 50, 47, 48, 39, 23, 34}));
  for (const char* s : {"the image model", "attention window block cache", "gemma tessera"}) {
    const std::vector<int32_t> ids = t.Encode(s, true).value();
    EXPECT_EQ(t.Decode(ids).value(), s);
  }
  std::string streamed;
  const std::vector<int32_t> ids = t.Encode("the image model", false).value();
  for (int32_t id : ids) streamed += t.Piece(id);
  EXPECT_EQ(streamed, " the image model");
}

// gemma_style.model: 0-8 <pad> <eos> <bos> <unk> <mask> <start_of_turn> <end_of_turn> <start_of_image>
// <end_of_image> (control, <unk> unknown), 9-12 "\n\n" "\t" U+2581x4 "tessera" (user-defined).
TEST(SentencePieceTokenizer, SpecialTokensInText) {
  auto tok = SentencePieceTokenizer::Load(TESSERA_TESTDATA_DIR "/tokenizer/gemma_style.model");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const auto& t = *tok.value();
  auto concat = [](std::initializer_list<std::vector<int32_t>> parts) {
    std::vector<int32_t> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  const std::vector<int32_t> user = t.Encode("user", false).value(), hi = t.Encode(" hi", false).value();
  EXPECT_EQ(t.EncodeWithSpecialTokens("<bos><start_of_turn>user\n\n hi<end_of_turn>").value(),
            concat({{2, 5}, user, {9}, hi, {6}}));
  EXPECT_EQ(t.EncodeWithSpecialTokens("<unk><mask>tessera<end_of_image>").value(), (std::vector<int32_t>{3, 4, 12, 8}));
  // Encode leaves control pieces as text: no id 5 comes out of it.
  const std::vector<int32_t> plain = t.Encode("<start_of_turn>", false).value();
  EXPECT_TRUE(std::find(plain.begin(), plain.end(), 5) == plain.end());
  EXPECT_EQ(t.EncodeWithSpecialTokens("").value(), std::vector<int32_t>{});
}

// A checkpoint with tokenizer.model and tokenizer.json (Gemma 3 ships both): the SentencePiece model
// wins, and the added tokens past its pieces come from tokenizer.json, as <image_soft_token> (id
// 262144 beyond Gemma 3's 262144 pieces; here 512 beyond gemma_style.model's 512).
TEST(SentencePieceTokenizer, CheckpointDirTakesAddedTokensPastTheModelFromTokenizerJson) {
  testing::TempDir dir;
  std::filesystem::copy_file(TESSERA_TESTDATA_DIR "/tokenizer/gemma_style.model", dir.File("tokenizer.model"));
  auto model_only = Tokenizer::FromCheckpointDir(dir.path());
  ASSERT_TRUE(model_only.ok()) << model_only.status().message();
  ASSERT_EQ(model_only.value()->vocab_size(), 512);
  const std::vector<int32_t> hi = model_only.value()->Encode(" hi", false).value();

  testing::WriteText(dir.File("tokenizer.json"), R"({"model": {"type": "Unigram"}, "added_tokens": [
      {"id": 7, "content": "<start_of_image>", "special": true},
      {"id": 512, "content": "<image_soft_token>", "special": true},
      {"id": 513, "content": "<extra>", "special": false}]})");
  auto both = Tokenizer::FromCheckpointDir(dir.path());
  ASSERT_TRUE(both.ok()) << both.status().message();
  const Tokenizer& t = *both.value();
  EXPECT_EQ(t.vocab_size(), 512);  // still the model's pieces
  std::vector<int32_t> want = {7, 512, 512};
  want.insert(want.end(), hi.begin(), hi.end());
  want.insert(want.end(), {513, 8});
  EXPECT_EQ(t.EncodeWithSpecialTokens("<start_of_image><image_soft_token><image_soft_token> hi<extra><end_of_image>").value(),
            want);
  EXPECT_EQ(t.Piece(512), "");  // no surface text: the placeholder never streams out

  // A bad entry names the file and the field.
  testing::WriteText(dir.File("tokenizer.json"), R"({"added_tokens": [{"id": 512, "content": "<a>"}, {"id": -4, "content": "<b>"}]})");
  auto bad = Tokenizer::FromCheckpointDir(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(dir.File("tokenizer.json")), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("added_tokens[1].id"), std::string::npos) << bad.status().message();
  testing::WriteText(dir.File("tokenizer.json"), "[1, 2]");
  EXPECT_FALSE(Tokenizer::FromCheckpointDir(dir.path()).ok());
}

TEST(SentencePieceTokenizer, BadInput) {
  auto missing = SentencePieceTokenizer::Load("/nonexistent/tokenizer.model");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/tokenizer.model"), std::string::npos);
  auto tok = SentencePieceTokenizer::Load(TESSERA_TESTDATA_DIR "/tokenizer/tiny.model");
  ASSERT_TRUE(tok.ok());
  auto bad = tok.value()->Decode({1, 64});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("id 64 is outside [0, 64)"), std::string::npos);
}

}  // namespace
}  // namespace tessera::tokenizer
