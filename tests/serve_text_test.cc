// The server's text path: TextStream (UTF-8 never split, stop strings held back and cut) and the
// JSON writer (always valid JSON, checked by parsing it back with nlohmann::json).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api_response.h"
#include "server/text_stream.h"

namespace tessera::server {
namespace {

// An independent UTF-8 check (RFC 3629's table) for what the stream hands out.
bool IsValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// Feeds `pieces`, returning what each call handed out, then Finish()'s.
std::vector<std::string> Feed(TextStream& t, const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const std::string& p : pieces) out.emplace_back(t.Append(p));
  out.emplace_back(t.Finish());
  return out;
}

TEST(ServeText, ByteFallbackTokensNeverSplitACharacter) {
  // "€ 😀 é" one byte per token, as byte-fallback tokens carry them.
  const std::string text = "\xE2\x82\xAC \xF0\x9F\x98\x80 \xC3\xA9";
  std::vector<std::string> pieces;
  for (char c : text) pieces.emplace_back(1, c);
  TextStream t;
  const std::vector<std::string> out = Feed(t, pieces);
  std::string joined;
  for (const std::string& o : out) {
    EXPECT_TRUE(IsValidUtf8(o)) << o;
    joined += o;
  }
  EXPECT_EQ(joined, text);
  // The euro sign comes out whole with its third byte, not before.
  EXPECT_EQ(out[0], "");
  EXPECT_EQ(out[1], "");
  EXPECT_EQ(out[2], "\xE2\x82\xAC");
}

TEST(ServeText, StopStringIsCutAndHeldBackWhileItMayStart) {
  TextStream t({"STOP"});
  EXPECT_EQ(t.Append("Hel"), "Hel");
  EXPECT_EQ(t.Append("lo S"), "lo ");  // "S" may start STOP
  EXPECT_EQ(t.Append("T"), "");
  EXPECT_FALSE(t.stopped());
  EXPECT_EQ(t.Append("OP and more"), "");
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(t.stop_matched(), "STOP");
  EXPECT_EQ(t.text(), "Hello ");
  EXPECT_EQ(t.Append("x"), "");
  EXPECT_EQ(t.Finish(), "");
}

TEST(ServeText, AHeldPrefixThatDoesNotCompleteIsSent) {
  TextStream t({"STOP"});
  EXPECT_EQ(t.Append("a ST"), "a ");
  EXPECT_EQ(t.Append("ORE"), "STORE");
  EXPECT_EQ(t.Append("S"), "");
  EXPECT_EQ(t.Finish(), "S");  // generation ended: the held text is the output's
  EXPECT_EQ(t.text(), "a STORES");
  EXPECT_FALSE(t.stopped());
}

TEST(ServeText, EarliestOfSeveralStopsWinsInsideOnePiece) {
  TextStream t({"world", "lo"});
  EXPECT_EQ(t.Append("hello world"), "hel");
  EXPECT_EQ(t.stop_matched(), "lo");
  TextStream u({"\n\n", "User:"});
  EXPECT_EQ(u.Append("answer\n"), "answer");
  EXPECT_EQ(u.Append("\nUser:"), "");
  EXPECT_EQ(u.stop_matched(), "\n\n");
  EXPECT_EQ(u.text(), "answer");
}

TEST(ServeText, StopStringsAcrossMultibyteCharacters) {
  TextStream t({"\xC3\xA9t\xC3\xA9"});  // "été"
  std::string out;
  for (char c : std::string("un \xC3\xA9t\xC3\xA9 chaud")) out += t.Append(std::string(1, c));
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(out, "un ");
}

TEST(ServeText, UnfinishedCharacterAtTheEndIsFlushed) {
  TextStream t;
  EXPECT_EQ(t.Append("ok\xE2\x82"), "ok");
  EXPECT_EQ(t.Finish(), "\xE2\x82");
  std::string json;
  AppendJsonString(t.text(), &json);
  EXPECT_EQ(nlohmann::json::parse(json).get<std::string>(), "ok\xEF\xBF\xBD\xEF\xBF\xBD");  // two U+FFFD
}

TEST(ServeText, JsonStringsRoundTrip) {
  for (const std::string s : {std::string(""), std::string("plain"), std::string("q\"b\\s/\n\r\t\b\f"),
                              std::string("ctl\x01\x1f\x7f"), std::string("nul\0in", 6),
                              std::string("\xE2\x82\xAC\xF0\x9F\x98\x80\xC3\xA9\xEF\xBF\xBD")}) {
    std::string json;
    AppendJsonString(s, &json);
    const nlohmann::json parsed = nlohmann::json::parse(json, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << json;
    EXPECT_EQ(parsed.get<std::string>(), s);
  }
}

TEST(ServeText, InvalidUtf8BecomesReplacementCharacters) {
  // A stray continuation, an overlong '/', a surrogate, a value past U+10FFFF, a truncated sequence.
  const std::string bad = "a\x80" "b\xC0\xAF" "c\xED\xA0\x80" "d\xF4\x90\x80\x80" "e\xE2\x82";
  std::string json;
  AppendJsonString(bad, &json);
  const nlohmann::json parsed = nlohmann::json::parse(json, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << json;
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(parsed.get<std::string>(), "a" + r + "b" + r + r + "c" + r + r + r + "d" + r + r + r + r + "e" + r + r);
}

TEST(ServeText, ChunksAreTheApisShapes) {
  ChunkWriter chat(ApiRoute::kChat, "chatcmpl-1", 42, "m\"x", /*include_usage=*/true);
  auto event = [](std::string_view s) {
    EXPECT_EQ(s.substr(0, 6), "data: ");
    EXPECT_EQ(s.substr(s.size() - 2), "\n\n");
    return nlohmann::json::parse(s.substr(6));
  };
  nlohmann::json j = event(chat.Role());
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["model"], "m\"x");
  EXPECT_EQ(j["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(j.contains("usage") && j["usage"].is_null());
  j = event(chat.Text("h\xC3\xA9"));
  EXPECT_EQ(j["choices"][0]["delta"]["content"], "h\xC3\xA9");
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  j = event(chat.Finish("length"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["delta"].empty());
  j = event(chat.UsageChunk(Usage{5, 3}));
  EXPECT_TRUE(j["choices"].empty());
  EXPECT_EQ(j["usage"], (nlohmann::json{{"prompt_tokens", 5}, {"completion_tokens", 3}, {"total_tokens", 8}}));
  ChunkWriter text(ApiRoute::kCompletion, "cmpl-1", 42, "m", /*include_usage=*/false);
  j = event(text.Text("abc"));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "abc");
  EXPECT_FALSE(j.contains("usage"));
}

TEST(ServeText, CompletionBodiesAndErrors) {
  nlohmann::json j = nlohmann::json::parse(
      CompletionJson(ApiRoute::kChat, "chatcmpl-9", 7, "model", "hi\n", "stop", Usage{4, 2}));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 7);
  EXPECT_EQ(j["choices"][0]["message"], (nlohmann::json{{"role", "assistant"}, {"content", "hi\n"}}));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["total_tokens"], 6);
  j = nlohmann::json::parse(CompletionJson(ApiRoute::kCompletion, "cmpl-9", 7, "model", "x", "length", Usage{1, 1}));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "x");
  j = nlohmann::json::parse(ErrorJson(BadRequest("messages[0].role", "bad \"role\"")));
  EXPECT_EQ(j, (nlohmann::json{{"error",
                                {{"message", "bad \"role\""}, {"type", "invalid_request_error"},
                                 {"param", "messages[0].role"}, {"code", nullptr}}}}));
}

}  // namespace
}  // namespace tessera::server
