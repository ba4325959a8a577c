// The response bodies: completions, their SSE chunks, errors, the model list. Chunks are written
// into one reused buffer from a prefix and suffix made once per request, so a stream allocates
// nothing per token beyond the text itself.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_request.h"

namespace tessera::server {

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// Appends `text` as a JSON string literal (quoted). Invalid UTF-8 becomes U+FFFD, so the output
// is always valid JSON whatever bytes the tokens made.
void AppendJsonString(std::string_view text, std::string* out);

std::string ErrorJson(const ApiError& e);

// The ids of a response with return_token_ids (null: the request did not ask for them): the prompt's
// (top level "prompt_token_ids") and the completion's (the choice's "token_ids").
struct TokenIds {
  const std::vector<int32_t>* prompt = nullptr;
  std::span<const int32_t> completion;
};

// The non-streaming body: a chat.completion or a text_completion object.
std::string CompletionJson(ApiRoute route, const std::string& id, int64_t created, const std::string& model,
                           std::string_view text, const char* finish_reason, const Usage& usage,
                           const TokenIds* ids = nullptr);

// One stream's "data: {...}\n\n" events.
class ChunkWriter {
 public:
  ChunkWriter(ApiRoute route, const std::string& id, int64_t created, const std::string& model, bool include_usage);

  // return_token_ids: every choice chunk carries "token_ids" (the ids given with it), and the first
  // chunk written also "prompt_token_ids" (`prompt` must outlive the writer).
  void ReturnTokenIds(const std::vector<int32_t>* prompt);

  // A content chunk (chat: delta {"content"}; completion: "text"). The view is valid until the next call.
  std::string_view Text(std::string_view text, std::span<const int32_t> ids = {});
  // Chat only: the first chunk, delta {"role": "assistant", "content": ""}.
  std::string_view Role();
  // The last chunk of the choice: an empty delta / text, its finish_reason, the ids not sent yet.
  std::string_view Finish(const char* finish_reason, std::span<const int32_t> ids = {});
  // After Finish when include_usage: a chunk with no choices and the usage.
  std::string_view UsageChunk(const Usage& usage);
  // An error after the stream started (the status line is gone by then).
  std::string_view Error(const ApiError& e);
  static constexpr std::string_view kDone = "data: [DONE]\n\n";

 private:
  // head_, then the prompt ids once; the choice's opening.
  void Begin();
  // The choice's end: logprobs, finish_reason, token ids, usage placeholder.
  void End(const char* finish_reason, std::span<const int32_t> ids);

  ApiRoute route_;
  std::string head_;  // data: {"id": ..., "object": ..., "created": ..., "model": ...,
  std::string usage_null_;
  bool token_ids_ = false;
  const std::vector<int32_t>* prompt_ids_ = nullptr;  // sent with the next chunk, then null
  std::string buf_;
};

}  // namespace tessera::server
