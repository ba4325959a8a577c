// Chat messages to prompt text with a checkpoint's Jinja chat template (chat_template.jinja,
// tokenizer_config.json's "chat_template", or a GGUF's tokenizer.chat_template), rendered by our
// own interpreter of the Jinja subset that chat templates use (docs/chat-templates.md). Without a
// template, the model family's built-in turn format.
#pragma once

#include <memory>
#include <string>

#include "tessera/status.h"

namespace tessera::chat {

struct RenderOptions {
  bool add_generation_prompt = true;
  std::string bos_token = "<bos>";
  std::string eos_token = "<eos>";
  // Optional JSON object whose members become template variables (e.g. "tools", "enable_thinking").
  std::string extra_context_json;
};

class ChatTemplate {
 public:
  // Parses the template source now, so a bad template fails at load (`name` is used in messages).
  static StatusOr<ChatTemplate> FromSource(const std::string& source, const std::string& name);
  // A checkpoint directory (chat_template.jinja, else tokenizer_config.json's "chat_template") or a
  // .gguf file (tokenizer.chat_template); NotFound when the model has no template.
  static StatusOr<ChatTemplate> FromModelPath(const std::string& path);
  // The family's turn format (Gemma 3 and Gemma 4 model types), used when a model has no template.
  static StatusOr<ChatTemplate> Builtin(const std::string& model_type);

  // messages_json: a JSON array of {"role": ..., "content": ...}; content is a string or a list of
  // parts {"type": "text", "text": ...} / {"type": "image"}. Errors name the template and line.
  StatusOr<std::string> Render(const std::string& messages_json, const RenderOptions& options) const;

  const std::string& name() const;
  const std::string& source() const;

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::chat
