// The server's request parser (server/api_request.h): OpenAI request bodies to ApiRequest, every
// refusal a 400 naming the field. Expected values are written out by hand from the API's rules.
#include <gtest/gtest.h>

#include <string>

#include "server/api_request.h"

namespace tessera::server {
namespace {

ApiError Parse(ApiRoute route, const std::string& body, ApiRequest* r, const ApiLimits& limits = {}) {
  return ParseApiRequest(route, body, limits, r);
}

// The request is refused with 400 naming `param`, and the message mentions `word`.
void ExpectRefused(ApiRoute route, const std::string& body, const std::string& param, const std::string& word,
                   const ApiLimits& limits = {}) {
  ApiRequest r;
  const ApiError e = Parse(route, body, &r, limits);
  EXPECT_EQ(e.status, 400) << body;
  EXPECT_EQ(e.type, "invalid_request_error") << body;
  EXPECT_EQ(e.param, param) << body << " -> " << e.message;
  EXPECT_NE(e.message.find(word), std::string::npos) << body << " -> " << e.message;
}

TEST(ServeRequest, ChatWithEveryField) {
  ApiRequest r;
  const ApiError e = Parse(ApiRoute::kChat, R"({"model": "m", "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi"},
                                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]}],
      "max_completion_tokens": 7, "max_tokens": 99, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "seed": 12,
      "stop": ["a", "bc"], "stream": true, "stream_options": {"include_usage": true}, "user": "ignored", "n": 1})",
                           &r);
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.messages_json,
            R"([{"content":"be brief","role":"system"},{"content":[{"text":"hi","type":"text"},{"type":"image"}],"role":"user"}])");
  ASSERT_EQ(r.images.size(), 1u);
  EXPECT_EQ(r.images[0], "hello");
  EXPECT_EQ(r.image_params[0], "messages[1].content[1]");
  EXPECT_EQ(r.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(r.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.top_p, 0.9f);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_EQ(r.seed, 12u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(ServeRequest, DefaultsAreTheApis) {
  ApiRequest r;
  ASSERT_TRUE(Parse(ApiRoute::kChat, R"({"messages": [{"role": "user", "content": "x"}]})", &r).ok());
  EXPECT_TRUE(r.model.empty());
  EXPECT_FLOAT_EQ(r.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.top_p, 1.0f);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.stop.empty());
}

TEST(ServeRequest, CompletionPromptForms) {
  ApiRequest r;
  ASSERT_TRUE(Parse(ApiRoute::kCompletion, R"({"prompt": "once upon", "stop": "END"})", &r).ok());
  EXPECT_EQ(r.prompt_text, "once upon");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"END"}));
  ASSERT_TRUE(Parse(ApiRoute::kCompletion, R"({"prompt": [2, 17, 4]})", &r).ok());
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{2, 17, 4}));
  ASSERT_TRUE(Parse(ApiRoute::kCompletion, R"({"prompt": ["one"]})", &r).ok());
  EXPECT_EQ(r.prompt_text, "one");
  ASSERT_TRUE(Parse(ApiRoute::kCompletion, R"({"prompt": [[5, 6]]})", &r).ok());
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{5, 6}));
}

TEST(ServeRequest, BodyErrors) {
  ExpectRefused(ApiRoute::kChat, "{not json", "", "JSON");
  ExpectRefused(ApiRoute::kChat, "", "", "JSON");
  ExpectRefused(ApiRoute::kChat, "[1, 2]", "", "object");
  ExpectRefused(ApiRoute::kChat, R"({"model": 3, "messages": []})", "model", "string");
  // Invalid UTF-8 inside a JSON string is not JSON.
  ExpectRefused(ApiRoute::kCompletion, std::string("{\"prompt\": \"a\xff\"}"), "", "JSON");
}

TEST(ServeRequest, MessageErrorsNameTheField) {
  ExpectRefused(ApiRoute::kChat, R"({})", "messages", "required");
  ExpectRefused(ApiRoute::kChat, R"({"messages": []})", "messages", "empty");
  ExpectRefused(ApiRoute::kChat, R"({"messages": {"role": "user"}})", "messages", "list");
  ExpectRefused(ApiRoute::kChat, R"({"messages": [{"role": "user", "content": "a"}, 7]})", "messages[1]", "object");
  ExpectRefused(ApiRoute::kChat, R"({"messages": [{"role": "robot", "content": "a"}]})", "messages[0].role", "robot");
  ExpectRefused(ApiRoute::kChat, R"({"messages": [{"role": "user"}]})", "messages[0].content", "missing");
  ExpectRefused(ApiRoute::kChat, R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content", "string");
  ExpectRefused(ApiRoute::kChat, R"({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})",
                "messages[0].content[0].type", "audio");
  ExpectRefused(ApiRoute::kChat, R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
                "messages[0].content[0].text", "string");
  ApiLimits few;
  few.max_messages = 2;
  ExpectRefused(ApiRoute::kChat,
                R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                                 {"role": "user", "content": "c"}]})",
                "messages", "at most 2", few);
  // An assistant turn without content (it called tools) is an empty string.
  ApiRequest r;
  ASSERT_TRUE(Parse(ApiRoute::kChat, R"({"messages": [{"role": "assistant", "content": null}]})", &r).ok());
  EXPECT_EQ(r.messages_json, R"([{"content":"","role":"assistant"}])");
}

TEST(ServeRequest, ImagesOnlyAsBase64DataUrls) {
  auto image = [](const std::string& url) {
    return R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": ")" + url +
           R"("}}]}]})";
  };
  const std::string param = "messages[0].content[0].image_url.url";
  ExpectRefused(ApiRoute::kChat, image("https://example.com/cat.png"), param, "data:");
  ExpectRefused(ApiRoute::kChat, image("file:///etc/passwd"), param, "data:");
  ExpectRefused(ApiRoute::kChat, image("/etc/passwd"), param, "data:");
  ExpectRefused(ApiRoute::kChat, image("data:image/png,rawbytes"), param, "base64");
  ExpectRefused(ApiRoute::kChat, image("data:text/plain;base64,aGVsbG8="), param, "image/");
  ExpectRefused(ApiRoute::kChat, image("data:image/png;base64,aGV*bG8="), param, "base64");
  ExpectRefused(ApiRoute::kChat, image("data:image/png;base64,"), param, "empty");
  ApiLimits small;
  small.max_image_bytes = 4;
  ExpectRefused(ApiRoute::kChat, image("data:image/png;base64,aGVsbG8="), param, "larger", small);
  small = ApiLimits{};
  small.max_images = 1;
  ExpectRefused(ApiRoute::kChat,
                R"({"messages": [{"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}}]}]})",
                "messages[0].content[1]", "at most 1", small);
  // Unpadded base64 decodes too ("hi" is aGk).
  ApiRequest r;
  ASSERT_TRUE(Parse(ApiRoute::kChat, image("data:image/jpeg;base64,aGk"), &r).ok());
  EXPECT_EQ(r.images[0], "hi");
}

TEST(ServeRequest, SamplingAndLengthRanges) {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "temperature": 2.5})", "temperature", "[0, 2]");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "temperature": "hot"})", "temperature", "number");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "top_p": 0})", "top_p", "(0, 1]");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "top_p": 1.5})", "top_p", "(0, 1]");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "top_k": -2})", "top_k", ">= -1");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "top_k": 1.5})", "top_k", "integer");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "max_tokens": 0})", "max_tokens", ">= 1");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "max_completion_tokens": -3})", "max_completion_tokens", ">= 1");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "max_tokens": 18446744073709551615})", "max_tokens", "too large");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "seed": "x"})", "seed", "integer");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "stream": 1})", "stream", "boolean");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "stream_options": {"include_usage": true}})", "stream_options",
                "stream");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "stream": true, "stream_options": {"include_usage": 1}})",
                "stream_options.include_usage", "boolean");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "stop": ["a", "b", "c", "d", "e"]})", "stop", "at most 4");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "stop": ["a", ""]})", "stop[1]", "empty");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "stop": ["a", 3]})", "stop[1]", "string");
  // top_k -1 is "off", as other servers spell it; a negative seed is its two's complement.
  ApiRequest r;
  ASSERT_TRUE(Parse(ApiRoute::kChat, "{" + m + R"(, "top_k": -1, "seed": -1})", &r).ok());
  EXPECT_EQ(r.top_k, 0);
  EXPECT_EQ(r.seed, UINT64_MAX);
}

TEST(ServeRequest, UnsupportedFieldsAreRefusedNotIgnored) {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "n": 2})", "n", "n = 1");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "logprobs": true})", "logprobs", "not supported");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "top_logprobs": 2})", "top_logprobs", "not supported");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "presence_penalty": 0.5})", "presence_penalty", "not supported");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "logit_bias": {"5": 10}})", "logit_bias", "not supported");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "tools": [{"type": "function"}]})", "tools", "not supported");
  ExpectRefused(ApiRoute::kChat, "{" + m + R"(, "response_format": {"type": "json_object"}})", "response_format", "text");
  ExpectRefused(ApiRoute::kCompletion, R"({"prompt": "x", "echo": true})", "echo", "not supported");
  ExpectRefused(ApiRoute::kCompletion, R"({"prompt": "x", "logprobs": 3})", "logprobs", "not supported");
  ExpectRefused(ApiRoute::kCompletion, R"({"prompt": "x", "best_of": 3})", "best_of", "best_of = 1");
  ExpectRefused(ApiRoute::kCompletion, R"({"prompt": "x", "suffix": "end"})", "suffix", "not supported");
  // Their no-op values pass.
  ApiRequest r;
  EXPECT_TRUE(Parse(ApiRoute::kChat, "{" + m + R"(, "n": 1, "logprobs": false, "presence_penalty": 0,
                    "frequency_penalty": 0.0, "logit_bias": {}, "tools": [], "response_format": {"type": "text"}})",
                    &r).ok());
}

// Deep nesting anywhere (here in an ignored field) is refused before parsing: printing the value
// in an error message would recurse once per level.
TEST(ServeRequest, DeeplyNestedBodiesAreRefused) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ExpectRefused(ApiRoute::kCompletion, R"({"prompt": "x", "n": )" + deep + "}", "", "nests deeper");
  ExpectRefused(ApiRoute::kChat, R"({"messages": )" + deep + "}", "", "nests deeper");
}

TEST(ServeRequest, ReturnTokenIdsExtension) {
  ApiRequest r;
  ASSERT_TRUE(Parse(ApiRoute::kCompletion, R"({"prompt": "x", "return_token_ids": true})", &r).ok());
  EXPECT_TRUE(r.return_token_ids);
  ExpectRefused(ApiRoute::kCompletion, R"({"prompt": "x", "return_token_ids": "yes"})", "return_token_ids", "boolean");
}

TEST(ServeRequest, CompletionPromptErrors) {
  ExpectRefused(ApiRoute::kCompletion, R"({})", "prompt", "required");
  ExpectRefused(ApiRoute::kCompletion, R"({"prompt": ""})", "prompt", "empty");
  ExpectRefused(ApiRoute::kCompletion, R"({"prompt": []})", "prompt", "empty");
  ExpectRefused(ApiRoute::kCompletion, R"({"prompt": ["a", "b"]})", "prompt", "one prompt");
  ExpectRefused(ApiRoute::kCompletion, R"({"prompt": [1, -2]})", "prompt[1]", "non-negative");
  ExpectRefused(ApiRoute::kCompletion, R"({"prompt": [1, 4294967296]})", "prompt[1]", "32-bit");
  ExpectRefused(ApiRoute::kCompletion, R"({"prompt": [1, "a"]})", "prompt[1]", "non-negative");
  ExpectRefused(ApiRoute::kCompletion, R"({"prompt": {"text": "a"}})", "prompt", "string");
}

}  // namespace
}  // namespace tessera::server
