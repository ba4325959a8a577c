// SentencePiece tokenizer on a tiny model (tests/testdata/tokenizer/tiny.model, made by
// python/scripts/make_tiny_tokenizer.sh). Expected ids were produced by Debian's spm_encode.
#include <gtest/gtest.h>

#include "tessera/tokenizer.h"

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
