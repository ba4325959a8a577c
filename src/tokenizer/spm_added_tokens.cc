// SentencePieceTokenizer::AddTokensBeyondModel: the added tokens a tokenizer.json lists past the
// SentencePiece model's pieces. Only "added_tokens" is read, so a tokenizer.json whose model part
// this project does not parse (docs/tokenizers.md) still lends its added tokens.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>

#include "io/input_file.h"
#include "io/json_nesting.h"
#include "tessera/tokenizer.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/tokenizer_json.h"

namespace tessera::tokenizer {

Status SentencePieceTokenizer::AddTokensBeyondModel(const std::string& path) {
  StatusOr<std::string> text = io::ReadInputFile(path, "tokenizer.json", kMaxTokenizerJsonBytes);
  if (!text.ok()) return Status(text.status().code(), "SentencePieceTokenizer: " + text.status().message());
  return AddTokensBeyondModelFromText(text.value(), path);
}

Status SentencePieceTokenizer::AddTokensBeyondModelFromText(std::string_view json_text, const std::string& path) {
  TESSERA_RETURN_IF_ERROR(io::CheckJsonNesting(json_text, "tokenizer.json '" + path + "'"));
  const nlohmann::json root = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) return InvalidArgument("tokenizer.json '" + path + "': not a JSON object");
  const auto added = root.find("added_tokens");
  if (added == root.end() || added->is_null()) return Status::Ok();
  if (!added->is_array()) return InvalidArgument("tokenizer.json '" + path + "': added_tokens is not an array");
  for (size_t i = 0; i < added->size(); ++i) {
    const nlohmann::json& a = (*added)[i];
    const std::string where = "tokenizer.json '" + path + "': added_tokens[" + std::to_string(i) + "]";
    if (!a.is_object()) return InvalidArgument(where + " is not an object");
    const auto id = a.find("id"), content = a.find("content"), special = a.find("special");
    if (id == a.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > std::numeric_limits<int32_t>::max())
      return InvalidArgument(where + ".id is not an id in [0, 2^31)");
    if (content == a.end() || !content->is_string() || content->get_ref<const std::string&>().empty())
      return InvalidArgument(where + ".content is not a non-empty string");
    const int32_t token = static_cast<int32_t>(id->get<int64_t>());
    if (token < vocab_size()) continue;  // one of the model's pieces: its type already decided
    added_->Add(content->get_ref<const std::string&>(), token, special != a.end() && special->is_boolean() && special->get<bool>());
  }
  return Status::Ok();
}

}  // namespace tessera::tokenizer
