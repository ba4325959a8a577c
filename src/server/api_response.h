// The response bodies: completions, their SSE chunks, errors, the model list. Chunks are written
// into one reused buffer from a prefix and suffix made once per request, so a stream allocates
// nothing per token beyond the text itself.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "server/api_request.h"

namespace tessera::server {

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// Appends `text` as a JSON string literal (quoted). Invalid UTF-8 becomes U+FFFD, so the output
// is always valid JSON whatever bytes the tokens made.
void AppendJsonString(std::string_view text, std::string* out);

std::string ErrorJson(const ApiError& e);

// The non-streaming body: a chat.completion or a text_completion object.
std::string CompletionJson(ApiRoute route, const std::string& id, int64_t created, const std::string& model,
                           std::string_view text, const char* finish_reason, const Usage& usage);

// One stream's "data: {...}\n\n" events.
class ChunkWriter {
 public:
  ChunkWriter(ApiRoute route, const std::string& id, int64_t created, const std::string& model, bool include_usage);

  // A content chunk (chat: delta {"content"}; completion: "text"). The view is valid until the next call.
  std::string_view Text(std::string_view text);
  // Chat only: the first chunk, delta {"role": "assistant", "content": ""}.
  std::string_view Role();
  // The last chunk of the choice: an empty delta / text and its finish_reason.
  std::string_view Finish(const char* finish_reason);
  // After Finish when include_usage: a chunk with no choices and the usage.
  std::string_view UsageChunk(const Usage& usage);
  // An error after the stream started (the status line is gone by then).
  std::string_view Error(const ApiError& e);
  static constexpr std::string_view kDone = "data: [DONE]\n\n";

 private:
  ApiRoute route_;
  std::string head_;  // data: {"id": ..., "object": ..., "created": ..., "model": ...,
  std::string usage_null_;
  std::string buf_;
};

}  // namespace tessera::server
