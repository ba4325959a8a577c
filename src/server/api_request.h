// The OpenAI request bodies the server accepts, parsed and validated into one struct before any
// model work (docs/serving.md "Requests"). The parser knows nothing of the model: the model name,
// the context length and the images' pixels are checked later, by the handler.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::server {

enum class ApiRoute { kChat, kCompletion };

// What one request may ask for, whatever its body size allows.
struct ApiLimits {
  int64_t max_messages = 256;
  int64_t max_images = 8;                       // image parts per request
  int64_t max_image_bytes = int64_t{16} << 20;  // one decoded data URL
  int64_t max_stop = 4;                         // stop strings, as the API allows
  int64_t max_stop_bytes = 256;                 // one stop string
};

// An error in the API's shape ({"error": {"message", "type", "param", "code"}}); status 0: none.
struct ApiError {
  int status = 0;
  std::string type, code, param, message;
  bool ok() const { return status == 0; }
};
// 400 invalid_request_error naming the field (`param`, e.g. "messages[2].content").
ApiError BadRequest(std::string param, std::string message);

struct ApiRequest {
  ApiRoute route = ApiRoute::kChat;
  std::string model;  // empty: the request named none (the served model is meant)

  // Chat: the messages as the chat template takes them (a JSON array of {"role", "content"}, content a
  // string or a list of {"type": "text", "text"} / {"type": "image"} parts), and each image part's
  // bytes (its data URL decoded), in order.
  std::string messages_json;
  std::vector<std::string> images;
  std::vector<std::string> image_params;  // where each image was, e.g. "messages[1].content[0]"

  // Completion: a text prompt, or token ids.
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;

  std::optional<int64_t> max_tokens;  // max_completion_tokens or max_tokens; empty: up to the context
  float temperature = 1.0f;           // the API's defaults
  float top_p = 1.0f;
  int64_t top_k = 0;                  // an extension (0 or -1: off)
  std::optional<uint64_t> seed;       // empty: a fresh one per request
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // vLLM's extension: the prompt's and the completion's token ids in the response.
  bool return_token_ids = false;
};

// JSON body -> request. Every refusal names the field and what it must be.
ApiError ParseApiRequest(ApiRoute route, std::string_view body, const ApiLimits& limits, ApiRequest* out);

// "data:<type>;base64,<payload>" -> the payload's bytes. Only base64 data URLs: any other URL is
// refused (the server never fetches or opens what a request names).
ApiError DecodeDataUrl(std::string_view url, const std::string& param, int64_t max_bytes, std::string* out);

}  // namespace tessera::server
