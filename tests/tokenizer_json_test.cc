// tokenizer.json (HfTokenizer, Tokenizer::FromCheckpointDir): a hand-made file of the shape
// transformers writes for Gemma, with ids worked out by hand from the library's rules; every
// refusal names its field and the file. The comparison with the `tokenizers` package on real
// conversions is python/tests/test_tokenizer_json.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "temp_dir.h"
#include "tessera/tokenizer.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/hf_tokenizer.h"

#ifndef TESSERA_TESTDATA_DIR
#define TESSERA_TESTDATA_DIR "tests/testdata"
#endif

namespace tessera::tokenizer {
namespace {

using tessera::testing::TempDir;
using Json = nlohmann::json;
const std::string kSpace = "\xe2\x96\x81";  // U+2581
constexpr int32_t kByte0 = 24;              // id of <0x00>
constexpr int32_t kChannel = kByte0 + 256, kImage = kChannel + 1;

int32_t Byte(unsigned char c) { return kByte0 + c; }

Json AddedToken(int id, const std::string& content, bool special, bool normalized = false) {
  return {{"id", id},        {"content", content},       {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", normalized}, {"special", special}};
}

// Ids: 0-4 specials, 5-23 letters and their merges, 24-279 <0x00>..<0xFF>, 280 <|channel> (not
// special), 281 <|image|> (special, outside model.vocab, as Gemma 3's <image_soft_token>).
Json HandMade() {
  std::vector<std::string> words = {"<pad>",
                                    "<eos>",
                                    "<bos>",
                                    "<unk>",
                                    "<start_of_turn>",
                                    "h",
                                    "e",
                                    "l",
                                    "o",
                                    kSpace,
                                    "w",
                                    "r",
                                    "d",
                                    "he",
                                    "ll",
                                    "hell",
                                    "hello",
                                    kSpace + "w",
                                    "or",
                                    kSpace + "wor",
                                    "ld",
                                    kSpace + "world",
                                    "\n",
                                    "\n\n"};
  static const char* kHex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) words.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
  words.push_back("<|channel>");
  Json vocab = Json::object();
  for (size_t i = 0; i < words.size(); ++i) vocab[words[i]] = i;
  // Pairs built one by one: nlohmann reads a braced list of string pairs as an object.
  Json merges = Json::array();
  for (const auto& [l, r] : std::vector<std::pair<std::string, std::string>>{{"h", "e"},
                                                                             {"l", "l"},
                                                                             {"he", "ll"},
                                                                             {"hell", "o"},
                                                                             {kSpace, "w"},
                                                                             {"o", "r"},
                                                                             {kSpace + "w", "or"},
                                                                             {"l", "d"},
                                                                             {kSpace + "wor", "ld"},
                                                                             {"\n", "\n"}})
    merges.push_back(Json::array({l, r}));
  Json added = Json::array();
  for (int i = 0; i < 5; ++i) added.push_back(AddedToken(i, words[i], true));
  added.push_back(AddedToken(kChannel, "<|channel>", false));
  added.push_back(AddedToken(kImage, "<|image|>", true));
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}}},
          {"pre_tokenizer",
           {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
            {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {2}}, {"tokens", {"<bos>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}}}}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", "<unk>"},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

std::unique_ptr<HfTokenizer> Load(const Json& j) {
  auto t = HfTokenizer::FromText(j.dump(), "hand.json");
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(t.value()) : nullptr;
}

TEST(TokenizerJson, EncodesAsTheLibraryDoes) {
  auto t = Load(HandMade());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), kImage + 1);
  EXPECT_EQ(t->bos_id(), 2);
  EXPECT_EQ(t->eos_id(), 1);
  const std::vector<int32_t> turn_as_text = {Byte('<'), Byte('s'), Byte('t'), Byte('a'), 11, Byte('t'), Byte('_'), 8,
                                             Byte('f'), Byte('_'), Byte('t'), Byte('u'), 11, Byte('n'), Byte('>')};
  struct Case {
    std::string text;
    std::vector<int32_t> plain, special;  // Encode(text, false), EncodeWithSpecialTokens(text)
  };
  std::vector<int32_t> turn_hello = turn_as_text;
  turn_hello.insert(turn_hello.end(), {16, 23});
  const std::vector<Case> cases = {
      {"", {}, {}},
      {"hello world", {16, 21}, {16, 21}},  // h+e, l+l, he+ll, hell+o; U+2581+w, o+r, then l+d, U+2581wor+ld
      {"\xc3\xa9", {Byte(0xc3), Byte(0xa9)}, {Byte(0xc3), Byte(0xa9)}},  // not a token: its bytes
      {"<start_of_turn>hello\n\n", turn_hello, {4, 16, 23}},
      {"x<|channel>", {Byte('x'), kChannel}, {Byte('x'), kChannel}},  // not special: found either way
      {"<bos><|image|>",
       {Byte('<'), Byte('b'), 8, Byte('s'), Byte('>'), Byte('<'), Byte('|'), Byte('i'), Byte('m'), Byte('a'), Byte('g'),
        6, Byte('|'), Byte('>')},
       {2, kImage}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(t->EncodeWithSpecialTokens(c.text).value(), c.special) << c.text;
    EXPECT_EQ(t->Encode(c.text, false).value(), c.plain) << c.text;
  }
  EXPECT_EQ(t->Encode("hello", true).value(), (std::vector<int32_t>{2, 16}));
}

TEST(TokenizerJson, DecodesAsTheByteFallbackDecoder) {
  auto t = Load(HandMade());
  ASSERT_NE(t, nullptr);
  const std::string kReplacement = "\xef\xbf\xbd";              // U+FFFD
  EXPECT_EQ(t->Decode({2, 16, 21, 1}).value(), "hello world");  // specials skipped
  EXPECT_EQ(t->Decode({Byte(0xc3), Byte(0xa9), kChannel, kImage}).value(), "\xc3\xa9<|channel>");
  EXPECT_EQ(t->Decode({Byte(0xc3), 16}).value(), kReplacement + "hello");               // a cut UTF-8 sequence
  EXPECT_EQ(t->Decode({Byte(0xe6), Byte(0x9d)}).value(), kReplacement + kReplacement);  // one per byte
  EXPECT_EQ(t->Piece(Byte(0xc3)), "\xc3");
  EXPECT_EQ(t->Piece(9), " ");
  EXPECT_EQ(t->Piece(2), "");
  auto bad = t->Decode({5, kImage + 1});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("outside [0, 282)"), std::string::npos) << bad.status().message();
}

TEST(TokenizerJson, AddedTokensLeftmostThenLongest) {
  AddedTokenMatcher m;
  m.Add("ab", 1, false);
  m.Add("abc", 2, false);
  m.Add("bcd", 3, false);
  m.Add("d", 4, true);
  auto pieces = m.Split("xabcd", true);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ((std::vector<int32_t>{pieces[0].token, pieces[1].token, pieces[2].token}),
            (std::vector<int32_t>{-1, 2, 4}));
  EXPECT_EQ(pieces[1].offset, 1u);
  pieces = m.Split("xabcd", false);  // d stays text, joined to the x before it
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].token, -1);
  EXPECT_EQ(pieces[2].offset, 4u);
}

// Each mutation of the hand-made file and what its error must say (beside the file name).
TEST(TokenizerJson, RefusalsNameTheField) {
  const std::vector<std::pair<std::function<void(Json&)>, std::string>> cases = {
      {[](Json& j) { j["extra"] = 1; }, "\"extra\" is not supported"},
      {[](Json& j) { j["version"] = "2.0"; }, "version is \"2.0\""},
      {[](Json& j) {
         j["truncation"] = {{"max_length", 8}};
       },
       "truncation is {"},
      {[](Json& j) { j["normalizer"] = nullptr; }, "normalizer is null"},
      {[](Json& j) {
         j["normalizer"] = {{"type", "Lowercase"}};
       },
       "normalizer is {\"type\":\"Lowercase\"}"},
      {[](Json& j) {
         j["pre_tokenizer"] = {{"type", "ByteLevel"}};
       },
       "pre_tokenizer is"},
      {[](Json& j) { j.erase("decoder"); }, "decoder is null"},
      {[](Json& j) { j.erase("model"); }, "model is missing"},
      {[](Json& j) { j["model"]["type"] = "Unigram"; }, "model.type is \"Unigram\""},
      {[](Json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout is 0.1"},
      {[](Json& j) { j["model"]["byte_fallback"] = false; }, "model.byte_fallback is false"},
      {[](Json& j) { j["model"]["ignore_merges"] = true; }, "model.ignore_merges is true"},
      {[](Json& j) { j["model"]["cache"] = 1; }, "model.\"cache\" is not supported"},
      {[](Json& j) { j["model"]["vocab"]["h"] = 6; }, "model.vocab[\"h\"] repeats id 6"},
      {[](Json& j) { j["model"]["vocab"]["h"] = 900; }, "model.vocab[\"h\"] is 900, not an id in [0, 281)"},
      {[](Json& j) { j["model"]["vocab"]["h"] = -1; }, "model.vocab[\"h\"] is -1"},
      {[](Json& j) { j["model"]["vocab"] = Json::object(); }, "model.vocab is missing, empty"},
      {[](Json& j) { j["model"]["unk_token"] = "<nope>"; }, "model.unk_token is \"<nope>\""},
      {[](Json& j) { j["model"]["merges"][1] = "ll"; }, "model.merges[1] \"ll\" is not two tokens"},
      {[](Json& j) {
         j["model"]["merges"][1] = Json::array({"l", "q"});
       },
       "model.merges[1] [\"l\",\"q\"]: \"q\" is not in"},
      {[](Json& j) {
         j["model"]["merges"][1] = Json::array({"o", "h"});
       },
       "\"oh\" is not in model.vocab"},
      {[](Json& j) { j["model"]["merges"][1] = 7; }, "model.merges[1] is 7"},
      {[](Json& j) { j["added_tokens"][4]["lstrip"] = true; }, "added_tokens[4].lstrip is true"},
      {[](Json& j) { j["added_tokens"][4]["single_word"] = true; }, "added_tokens[4].single_word is true"},
      {[](Json& j) { j["added_tokens"][4].erase("special"); }, "added_tokens[4].special is absent"},
      {[](Json& j) { j["added_tokens"][4]["content"] = "<turn>"; }, "which model.vocab gives to \"<start_of_turn>\""},
      {[](Json& j) { j["added_tokens"][4]["content"] = ""; }, "added_tokens[4].content is empty"},
      {[](Json& j) { j["added_tokens"][4]["id"] = 3; }, "repeats the id of added_tokens[3]"},
      {[](Json& j) { j["added_tokens"][6]["id"] = kImage + 1; }, "leaves a gap after model.vocab's 281 tokens"},
      {[](Json& j) { j["added_tokens"][6]["content"] = "hello"; }, "\"hello\" has id 281 but is also in model.vocab"},
      {[](Json& j) { j["post_processor"]["type"] = "RobertaProcessing"; }, "post_processor.type is"},
      {[](Json& j) {
         j["post_processor"]["single"].push_back({{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}});
       },
       "post_processor.single is"},
      {[](Json& j) { j["post_processor"]["special_tokens"]["<bos>"]["ids"] = Json::array({1}); },
       "post_processor.special_tokens[\"<bos>\"]"},
      {[](Json& j) { j["post_processor"]["single"][1]["Sequence"]["id"] = "B"; },
       "post_processor.single[1].Sequence.id"},
  };
  for (const auto& [mutate, needle] : cases) {
    Json j = HandMade();
    mutate(j);
    auto t = HfTokenizer::FromText(j.dump(), "bad.json");
    ASSERT_FALSE(t.ok()) << needle;
    const std::string& msg = t.status().message();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_NE(msg.find("bad.json"), std::string::npos) << msg;
  }
  for (const std::string& text :
       std::vector<std::string>{"", "{", "[1, 2]", std::string(200, '[') + std::string(200, ']')}) {
    auto t = HfTokenizer::FromText(text, "bad.json");
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_NE(t.status().message().find("bad.json"), std::string::npos) << t.status().message();
  }
}

TEST(TokenizerJson, CheckpointDirFallsBackToTokenizerJson) {
  TempDir dir;
  auto none = Tokenizer::FromCheckpointDir(dir.path());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("neither tokenizer.model nor tokenizer.json"), std::string::npos);
  std::ofstream(dir.File("tokenizer.json")) << HandMade().dump();
  auto json = Tokenizer::FromCheckpointDir(dir.path());
  ASSERT_TRUE(json.ok()) << json.status().message();
  EXPECT_EQ(json.value()->EncodeWithSpecialTokens("<bos>hello").value(), (std::vector<int32_t>{2, 16}));
  // tokenizer.model comes first where both are present.
  std::filesystem::copy_file(TESSERA_TESTDATA_DIR "/tokenizer/tiny.model", dir.File("tokenizer.model"));
  auto model = Tokenizer::FromCheckpointDir(dir.path());
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model.value()->vocab_size(), 64);
  // A broken tokenizer.json is an error naming it, not a fall back to nothing.
  std::filesystem::remove(dir.File("tokenizer.model"));
  std::ofstream(dir.File("tokenizer.json")) << "{\"model\": 1}";
  auto bad = Tokenizer::FromCheckpointDir(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(dir.File("tokenizer.json")), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace tessera::tokenizer
