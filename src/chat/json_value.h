// JSON in and out of template values: the messages and extra variables a caller passes (objects
// keep their key order, as Python's json.loads gives them), and transformers' `tojson` filter,
// which is Python's json.dumps.
#pragma once

#include <string>
#include <string_view>

#include "chat/value.h"
#include "tessera/status.h"

namespace tessera::chat {

// Nesting allowed in messages / extra variables (tool schemas nest a few levels).
inline constexpr int kMaxJsonInputNesting = 256;

// Parses `text`; errors name `what` ("messages") and say what is wrong.
StatusOr<Value> ParseJsonValue(std::string_view text, std::string_view what);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool indent = false;        // json.dumps(indent=...) given
  std::string indent_unit;    // one level of it
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// json.dumps(v, ...) as Python writes it (floats as repr, NaN/Infinity, \uXXXX escapes). False with
// `error` set for what Python refuses (an undefined value, a namespace, a macro, a tuple key...).
bool DumpJson(const Value& v, const JsonDumpOptions& options, std::string* out, std::string* error);

}  // namespace tessera::chat
