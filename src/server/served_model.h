// The model side of a request: the loaded model, its tokenizer and chat template, the stop tokens,
// and how a parsed request becomes a prompt (text, token ids, or chat messages with images).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/api_request.h"
#include "server/job.h"
#include "tessera/engine.h"
#include "tessera/tokenizer.h"

namespace tessera::server {

struct ServedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  // Messages JSON (ApiRequest::messages_json) -> prompt text; null when the model has no template.
  std::function<StatusOr<std::string>(const std::string& messages_json)> render_chat;
  std::string id;                         // the model's name in the API
  std::vector<int32_t> stop_tokens;       // the config's eos ids
  std::vector<int32_t> chat_stop_tokens;  // those and the turn-end token(s) the vocabulary has
  std::optional<int32_t> double_newline_id;  // "\n\n" as one token (Gemma 3 image layout)
};

// `path`: a checkpoint directory (tokenizer.model / tokenizer.json beside it) or a .gguf file
// (its vocabulary). `id`: empty for the path's basename.
StatusOr<ServedModel> LoadServedModel(const std::string& path, const LoadOptions& load, const std::string& id);

// What turns requests into prompts, with the server's image limits.
struct PromptLimits {
  int64_t max_image_pixels = int64_t{1} << 25;
  ops::MatmulPrecision encoder_precision = ops::MatmulPrecision::kF32;
};

// The request's prompt tokens (with image rows for image parts). Errors are the client's (400)
// unless the model failed (500).
ApiError BuildPrompt(const ServedModel& m, const ApiRequest& r, const PromptLimits& limits, PromptData* out);

}  // namespace tessera::server
