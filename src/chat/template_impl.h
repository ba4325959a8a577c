// Internals of tessera::chat::ChatTemplate shared by its source files: the parsed template, the
// loaders (template_files.cc) and the built-in turn formats (builtin_formats.cc).
#pragma once

#include <string>

#include "chat/ast.h"
#include "tessera/chat_template.h"
#include "tessera/status.h"

namespace tessera::chat {

struct ChatTemplate::Impl {
  std::string name;
  std::string source;
  Body root;
};

// Largest template source accepted (real ones are tens of kilobytes).
inline constexpr size_t kMaxTemplateBytes = 4u << 20;

// The template text a checkpoint directory or .gguf file carries, with the name to report it
// under; NotFound when it has none.
StatusOr<std::pair<std::string, std::string>> ReadModelTemplate(const std::string& path);

// Our own Jinja text for a model family's turn format; InvalidArgument for an unknown type.
StatusOr<std::string> BuiltinTemplateSource(const std::string& model_type);

}  // namespace tessera::chat
