// A Hugging Face tokenizer.json as the GGUF 'gemma4' vocabulary llama.cpp's converter writes for a
// Gemma 4 model (tessera quantize; docs/quantizing.md). Separate so that it can be fuzzed alone.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "tessera/status.h"
#include "tessera/tokenizer_vocab.h"

namespace tessera {

// `tj`: the parsed tokenizer.json; `where` starts every error message (e.g. the file's path).
StatusOr<tokenizer::TokenizerVocab> GgufVocabFromTokenizerJson(const nlohmann::json& tj, const std::string& where);
// The same from the file's text (nesting bounded before parsing).
StatusOr<tokenizer::TokenizerVocab> GgufVocabFromTokenizerJsonText(std::string_view text, const std::string& where);

}  // namespace tessera
