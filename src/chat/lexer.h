// Template source to tokens, with jinja2's whitespace rules as transformers configures them
// (trim_blocks and lstrip_blocks on, one trailing newline dropped, `{%-`/`-%}` and `+` markers),
// so the text between tags is exactly what jinja2 would output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/status.h"

namespace tessera::chat {

enum class TokKind : uint8_t {
  kText,        // template data, already whitespace-trimmed
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // text: the decoded literal
  kInt,
  kFloat,
  kOp,          // text: the operator ("+", "//", "==", "(", ...)
  kEof,
};

struct Token {
  TokKind kind = TokKind::kEof;
  int line = 1;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
};

// The error every syntax or runtime problem becomes: "chat template 'NAME' line N: message".
Status TemplateError(const std::string& name, int line, std::string_view message);

// Tokenizes `source` (valid UTF-8). The last token is kEof.
StatusOr<std::vector<Token>> Lex(std::string_view source, const std::string& name);

}  // namespace tessera::chat
